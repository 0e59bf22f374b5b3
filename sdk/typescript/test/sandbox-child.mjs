// The sandbox: a Node program with nothing but the environment the orchestrator gave it. Node 20's
// fetch does not read HTTPS_PROXY (NODE_USE_ENV_PROXY is Node 24's), so this child speaks the proxy
// protocol itself, as an HTTPS_PROXY-aware client library would: CONNECT with the URL's credentials,
// then TLS inside the tunnel, trusting the CA that NODE_EXTRA_CA_CERTS added at start-up.
import http from "node:http";
import https from "node:https";
import tls from "node:tls";

const proxy = new URL(process.env.HTTPS_PROXY);
const auth = "Basic " + Buffer.from(`${decodeURIComponent(proxy.username)}:${decodeURIComponent(proxy.password)}`).toString("base64");

function call(host, path, body) {
  return new Promise((resolve, reject) => {
    const connect = http.request({ host: proxy.hostname, port: proxy.port, method: "CONNECT", path: `${host}:443`,
      headers: { Host: `${host}:443`, "Proxy-Authorization": auth } });
    connect.on("connect", (res, socket) => {
      if (res.statusCode !== 200) {
        socket.destroy();
        return resolve({ status: res.statusCode, code: res.headers["x-airlock-code"] ?? null, body: "" });
      }
      const req = https.request({ host, port: 443, defaultPort: 443, path, method: body ? "POST" : "GET", servername: host,
        createConnection: () => tls.connect({ socket, servername: host }),
        headers: { "Content-Type": "application/json", Authorization: `Bearer ${process.env.DEMO_TOKEN}` } }, (r) => {
        let text = "";
        r.setEncoding("utf8");
        r.on("data", (d) => { text += d; });
        r.on("end", () => resolve({ status: r.statusCode, code: r.headers["x-airlock-code"] ?? null, body: text }));
      });
      req.on("error", reject);
      req.end(body ? JSON.stringify(body) : undefined);
    });
    connect.on("error", reject);
    connect.end();
  });
}

const out = { envHasAirlock: Object.keys(process.env).filter((k) => k.startsWith("AIRLOCK_")) };
out.hello = await call("demo.airlock.test", "/hello");
out.whoami = await call("demo.airlock.test", "/whoami");
out.pay = await call("demo.airlock.test", "/payments", { amount: 5 });
out.mallory = await call("demo.airlock.test", "/payments", { to: "mallory", amount: 5 });
out.elsewhere = await call("example.com", "/");
process.stdout.write(JSON.stringify(out));
