// An OAuth-protected MCP server whose authorization server comes from the TypeScript MCP
// SDK (npm @modelcontextprotocol/sdk), not from this project: the SDK's `mcpAuthRouter`
// with its demo in-memory provider (automatic consent), its `requireBearerAuth`, and its
// streamable-HTTP transport. Only the glue is written here.
//
// One process, ONE port (env PORT, 0 = any free port), which serves everything:
//   /mcp                                         MCP streamable HTTP (stateful), Bearer-protected
//   /.well-known/oauth-protected-resource/mcp    RFC 9728 metadata for http://127.0.0.1:<port>/mcp
//   /.well-known/oauth-authorization-server      RFC 8414 metadata, issuer http://127.0.0.1:<port>/
//   /register /authorize /token                  the SDK's AS (DCR, auto-consent, PKCE S256)
// The SDK's example splits AS and resource server over two ports only to illustrate that
// they can be separate; the demo provider does not need it. On stdout, once ready, exactly:
//   listening on http://127.0.0.1:<port>
// (the MCP URL is that plus /mcp).
//
// Env:
//   TOKEN_TTL_SECS   access-token lifetime (default 3600). The demo provider hard-codes an
//                    hour; a subclass re-stamps the expiry of each token it issues.
//   STRICT_RESOURCE  "0" to accept authorizations without (or with another) RFC 8707
//                    `resource`; by default, like the SDK example's --oauth-strict, the code
//                    exchange fails (500 server_error) unless /authorize got
//                    resource=http://127.0.0.1:<port>/mcp, and /mcp only accepts tokens
//                    issued for that resource.
//
// What this AS does NOT do (the demo provider, unchanged): no refresh tokens (the token
// response has none; grant_type=refresh_token answers 500), no revocation endpoint (the
// provider has no revokeToken, so the router mounts no /revoke and the metadata has no
// revocation_endpoint), no `iss` on the authorization redirect, client authentication at
// /token only by client_secret_post or none (no client_secret_basic).

import http from 'node:http';
import { randomUUID } from 'node:crypto';
import * as z from 'zod/v4';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { createMcpExpressApp } from '@modelcontextprotocol/sdk/server/express.js';
import { mcpAuthRouter, getOAuthProtectedResourceMetadataUrl } from '@modelcontextprotocol/sdk/server/auth/router.js';
import { requireBearerAuth } from '@modelcontextprotocol/sdk/server/auth/middleware/bearerAuth.js';
import { InvalidTokenError } from '@modelcontextprotocol/sdk/server/auth/errors.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';
import { DemoInMemoryAuthProvider } from '@modelcontextprotocol/sdk/examples/server/demoInMemoryOAuthProvider.js';

const TOKEN_TTL_SECS = Number(process.env.TOKEN_TTL_SECS || 3600);
const STRICT_RESOURCE = process.env.STRICT_RESOURCE !== '0';

/** The demo provider with a configurable access-token lifetime. */
class Provider extends DemoInMemoryAuthProvider {
    async exchangeAuthorizationCode(...args) {
        const tokens = await super.exchangeAuthorizationCode(...args);
        this.tokens.get(tokens.access_token).expiresAt = Date.now() + TOKEN_TTL_SECS * 1000;
        return { ...tokens, expires_in: TOKEN_TTL_SECS };
    }
}

function mcpServer() {
    const server = new McpServer({ name: 'sdk-oauth-server', version: '1.0.0' });
    server.registerTool(
        'whoami',
        { description: 'The OAuth client the bearer token was issued to' },
        async (extra) => {
            const auth = extra.authInfo ?? {};
            const who = { clientId: auth.clientId, scopes: auth.scopes, resource: auth.resource?.href };
            return { content: [{ type: 'text', text: `client_id=${auth.clientId} ${JSON.stringify(who)}` }] };
        }
    );
    server.registerTool(
        'echo',
        { description: 'Echoes the text', inputSchema: { text: z.string() } },
        async ({ text }) => ({ content: [{ type: 'text', text }] })
    );
    return server;
}

const httpServer = http.createServer();
httpServer.listen(Number(process.env.PORT || 0), '127.0.0.1', () => {
    const origin = `http://127.0.0.1:${httpServer.address().port}`;
    const mcpUrl = new URL(`${origin}/mcp`);
    const provider = new Provider(STRICT_RESOURCE ? (resource) => resource?.toString() === mcpUrl.href : undefined);

    const app = createMcpExpressApp(); // Host-header check for 127.0.0.1 + express.json()
    app.use(
        mcpAuthRouter({
            provider,
            issuerUrl: new URL(origin),
            resourceServerUrl: mcpUrl, // PRM at /.well-known/oauth-protected-resource/mcp
            scopesSupported: ['mcp:tools'],
            resourceName: 'SDK OAuth test server',
            // Tests start one process each; the SDK's per-IP rate limits would only add flakiness.
            authorizationOptions: { rateLimit: false },
            tokenOptions: { rateLimit: false },
            clientRegistrationOptions: { rateLimit: false }
        })
    );
    // The demo provider rejects unknown and expired tokens with a plain Error, which
    // requireBearerAuth answers with 500; as the OAuth error it is, it gets the 401 +
    // WWW-Authenticate a real resource server sends (RFC 6750 invalid_token).
    const verifier = {
        verifyAccessToken: (token) =>
            provider.verifyAccessToken(token).catch((error) => {
                throw new InvalidTokenError(error.message);
            })
    };
    const bearer = requireBearerAuth({
        verifier,
        resourceMetadataUrl: getOAuthProtectedResourceMetadataUrl(mcpUrl),
        expectedResource: STRICT_RESOURCE ? mcpUrl : undefined
    });

    // Stateful sessions, as in the SDK's simpleStreamableHttp example.
    const transports = new Map();
    app.post('/mcp', bearer, async (req, res) => {
        const sessionId = req.headers['mcp-session-id'];
        let transport = sessionId ? transports.get(sessionId) : undefined;
        if (!transport) {
            if (sessionId || !isInitializeRequest(req.body)) {
                const [status, code, message] = sessionId
                    ? [404, -32001, 'Session not found']
                    : [400, -32000, 'Bad Request: No valid session ID provided'];
                res.status(status).json({ jsonrpc: '2.0', error: { code, message }, id: null });
                return;
            }
            transport = new StreamableHTTPServerTransport({
                sessionIdGenerator: () => randomUUID(),
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
        await transport.handleRequest(req, res);
    };
    app.get('/mcp', bearer, existing);
    app.delete('/mcp', bearer, existing);

    httpServer.on('request', app);
    console.log(`listening on ${origin}`);
});

for (const signal of ['SIGINT', 'SIGTERM']) process.on(signal, () => process.exit(0));
