// Airlock's TypeScript SDK (Node ≥ 20, global fetch).
export * from "./errors.js";
export * from "./env.js";
export * from "./client.js";
