// A real `broker dev` for the suite: the binary built from this repository, on 127.0.0.1 with random
// ports. The binary is $AIRLOCK_BROKER, or built with `go build` into a temporary directory. Nothing
// is skipped: without a broker (or Go to build one) the suite fails.
import { spawn, execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, existsSync, mkdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { createInterface } from "node:readline";

export const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "../../..");

function brokerBinary(tmp) {
  if (process.env.AIRLOCK_BROKER) return process.env.AIRLOCK_BROKER;
  const go = ["go", "/usr/local/go/bin/go"].find((g) => g.startsWith("/") ? existsSync(g) : true);
  const out = join(tmp, "broker");
  execFileSync(go, ["build", "-o", out, "./cmd/broker"], { cwd: REPO, stdio: "inherit" });
  return out;
}

export async function startBroker() {
  const tmp = mkdtempSync(join(tmpdir(), "airlock-sdk-ts-"));
  const dataDir = join(tmp, "data");
  mkdirSync(dataDir);
  const binary = brokerBinary(tmp);
  const proc = spawn(binary, ["dev", "--sandbox-listen", "127.0.0.1:0", "--control-listen", "127.0.0.1:0",
    "--proxy-listen", "127.0.0.1:0", "--data-dir", dataDir], { env: { PATH: process.env.PATH }, stdio: ["ignore", "pipe", "pipe"] });
  let stderr = "";
  proc.stderr.on("data", (d) => { stderr += d; });
  const fields = {};
  const exited = new Promise((res) => proc.once("exit", res));
  const lines = createInterface({ input: proc.stdout });
  const ready = (async () => {
    for await (const line of lines) {
      const words = line.trim().split(/\s+/);
      if (line.startsWith("  sandbox plane")) fields.sandbox = words[2];
      else if (line.startsWith("  control plane")) fields.control = words[2];
      else if (line.startsWith("  admin token")) fields.admin = words[2];
      else if (line.startsWith("Ctrl-C stops the broker.")) return true;
    }
    return false;
  })();
  const ok = await Promise.race([ready, exited.then(() => false)]);
  if (!ok) throw new Error("broker dev exited: " + stderr);
  // The demo API's key, which only the broker holds: the canary of this suite.
  const demoKey = readFileSync(join(dataDir, "demo.key"), "utf8").trim();
  return {
    ...fields, binary, tmp, demoKey,
    async stop() {
      if (proc.exitCode === null) {
        proc.kill("SIGINT");
        await exited;
      }
    },
  };
}
