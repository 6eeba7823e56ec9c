// An MCP Apps server written with the official ext-apps SDK (`registerAppTool`,
// `registerAppResource`) on the TypeScript SDK 2.x, over stdio, for tests/api/apps.rs:
// - `show-board`: a tool with a view (`ui://board/view.html`), for the model and the app;
// - `move-card`: the same view's app-only tool (`visibility: ["app"]`);
// - `count-cards`: a model-only tool (`visibility: ["model"]`);
// - the view's resource with its CSP, permissions and border preference in `_meta.ui`,
//   on the listing and on the contents;
// - the extension declared in the server's capabilities.
// It counts `move-card` calls, so a test can tell a refused call never reached it.
import { McpServer } from "@modelcontextprotocol/server";
import { StdioServerTransport } from "@modelcontextprotocol/server/stdio";
import {
  registerAppTool,
  registerAppResource,
  RESOURCE_MIME_TYPE,
  EXTENSION_ID,
} from "@modelcontextprotocol/ext-apps/server";
import { z } from "zod";

const VIEW = "ui://board/view.html";
const VIEW_META = {
  ui: {
    csp: { connectDomains: ["https://api.board.example"], resourceDomains: ["https://cdn.board.example"] },
    permissions: { clipboardWrite: {} },
    prefersBorder: true,
  },
};
const HTML = "<!doctype html><html><body><h1>Board</h1><script>/* the board's view */</script></body></html>";

const server = new McpServer(
  { name: "board", version: "1.0.0" },
  { capabilities: { extensions: { [EXTENSION_ID]: {} } } },
);
let moves = 0;

registerAppTool(
  server,
  "show-board",
  {
    title: "Show board",
    description: "Shows the team's board of cards.",
    inputSchema: z.object({ column: z.string().optional() }),
    _meta: { ui: { resourceUri: VIEW } },
  },
  async ({ column }) => ({
    content: [{ type: "text", text: `the board${column ? ` (${column})` : ""}: 3 cards, ${moves} moves` }],
    structuredContent: { cards: 3, moves },
  }),
);

registerAppTool(
  server,
  "move-card",
  {
    description: "Moves a card to another column (the board's view calls it).",
    inputSchema: z.object({ card: z.string(), to: z.string() }),
    _meta: { ui: { resourceUri: VIEW, visibility: ["app"] } },
  },
  async ({ card, to }) => {
    moves += 1;
    return { content: [{ type: "text", text: `moved ${card} to ${to} (move ${moves})` }] };
  },
);

registerAppTool(
  server,
  "count-cards",
  {
    description: "Counts the cards on the board.",
    inputSchema: z.object({}),
    _meta: { ui: { visibility: ["model"] } },
  },
  async () => ({ content: [{ type: "text", text: `3 cards, ${moves} moves` }] }),
);

registerAppResource(server, "Board view", VIEW, { description: "The board", _meta: VIEW_META }, async () => ({
  contents: [{ uri: VIEW, mimeType: RESOURCE_MIME_TYPE, text: HTML, _meta: VIEW_META }],
}));

await server.connect(new StdioServerTransport());
