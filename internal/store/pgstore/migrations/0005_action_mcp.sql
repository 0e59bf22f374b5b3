-- Schema 5: a held MCP tool call's reviewer view (approval.MCPCall: the
-- tool, its digest when held, the server's description and annotations,
-- the retry join key) as JSON; null for every other action.

ALTER TABLE actions ADD COLUMN mcp json;
