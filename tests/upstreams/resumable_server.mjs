// An MCP server (the TypeScript SDK's streamable-HTTP transport with its in-memory event
// store) that closes a call's SSE stream mid-call, as SEP-1699 allows: the tool
// `interrupted` sends its priming event (with `retry`), closes the stream, and answers
// `WAIT_MS` later; a client that resumes with GET and `Last-Event-ID` after `retry` gets
// the answer replayed, one that does not never sees it. `GET /stats` counts the resuming
// GETs (`resumes`).
//
// One process, one port (env PORT, 0 = any free port). On stdout, once ready, exactly:
//   listening on http://127.0.0.1:<port>
// Env: RETRY_MS (default 200), WAIT_MS (default 600).

import http from 'node:http';
import { randomUUID } from 'node:crypto';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { createMcpExpressApp } from '@modelcontextprotocol/sdk/server/express.js';
import { InMemoryEventStore } from '@modelcontextprotocol/sdk/examples/shared/inMemoryEventStore.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';

const RETRY_MS = Number(process.env.RETRY_MS || 200);
const WAIT_MS = Number(process.env.WAIT_MS || 600);
let resumes = 0;

function mcpServer() {
    const server = new McpServer({ name: 'resumable-server', version: '1.0.0' });
    server.registerTool(
        'interrupted',
        { description: 'Closes its SSE stream, then answers after a while' },
        async (extra) => {
            extra.closeSSEStream?.();
            await new Promise((resolve) => setTimeout(resolve, WAIT_MS));
            return { content: [{ type: 'text', text: 'answered after the stream closed' }] };
        }
    );
    return server;
}

const app = createMcpExpressApp();
const transports = new Map();
app.post('/mcp', async (req, res) => {
    const sessionId = req.headers['mcp-session-id'];
    let transport = sessionId ? transports.get(sessionId) : undefined;
    if (!transport) {
        if (sessionId || !isInitializeRequest(req.body)) {
            res.status(sessionId ? 404 : 400).json({ jsonrpc: '2.0', error: { code: -32001, message: 'Session not found' }, id: null });
            return;
        }
        transport = new StreamableHTTPServerTransport({
            sessionIdGenerator: () => randomUUID(),
            eventStore: new InMemoryEventStore(),
            retryInterval: RETRY_MS,
            onsessioninitialized: (id) => transports.set(id, transport)
        });
        transport.onclose = () => transport.sessionId && transports.delete(transport.sessionId);
        await mcpServer().connect(transport);
    }
    await transport.handleRequest(req, res, req.body);
});
const existing = async (req, res) => {
    const transport = transports.get(req.headers['mcp-session-id']);
    if (!transport) {
        res.status(404).json({ jsonrpc: '2.0', error: { code: -32001, message: 'Session not found' }, id: null });
        return;
    }
    if (req.method === 'GET' && req.headers['last-event-id']) resumes += 1;
    await transport.handleRequest(req, res);
};
app.get('/mcp', existing);
app.delete('/mcp', existing);
app.get('/stats', (_req, res) => res.json({ resumes }));

const httpServer = http.createServer(app);
httpServer.listen(Number(process.env.PORT || 0), '127.0.0.1', () => {
    console.log(`listening on http://127.0.0.1:${httpServer.address().port}`);
});
for (const signal of ['SIGINT', 'SIGTERM']) process.on(signal, () => process.exit(0));
