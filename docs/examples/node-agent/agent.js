#!/usr/bin/env node
// A jingwei agent in Node.js, written from docs/protocol.md alone: it calls
// one tool through the jingwei service (jw.api.call, §13) with the agent
// role's credentials (§4) and prints the call's tool.result event.
//
//   npm install nats@2.29.3
//   node agent.js --session s-1 --tool catalog.lookup --args '{"sku":"A-1"}'
//
// Flags (each with the environment variable the jingwei CLI reads):
//   --server URL    NATS_URL    (default nats://127.0.0.1:4222)
//   --nkey FILE     NATS_NKEY   the agent role's nkey seed
//                               (default .jingwei/auth/agent.nk, what
//                               `jingwei serve` writes)
//   --creds FILE    NATS_CREDS  a credentials file instead (operator mode)
//   --session S --task T --tool NAME --args JSON --request-id ID
//   --timeout MS    how long to wait for the answer (default 30000)
//
// Exit status as the CLI's: 0 the tool's result, 3 a refusal or a result
// that is not ok (printed as {"error":{"code","message"}}), 1 anything else.
"use strict";

const fs = require("node:fs");
const crypto = require("node:crypto");
const { connect, nkeyAuthenticator, credsAuthenticator, JSONCodec, headers } = require("nats");

function flags(argv) {
  const f = {
    server: process.env.NATS_URL || "nats://127.0.0.1:4222",
    nkey: process.env.NATS_NKEY || "",
    creds: process.env.NATS_CREDS || "",
    session: "", task: "default", tool: "", args: "{}", "request-id": "", timeout: "30000",
  };
  for (let i = 0; i < argv.length; i += 2) {
    const k = argv[i].replace(/^--?/, "");
    if (!(k in f) || i + 1 >= argv.length) {
      usage(`unknown flag or missing value: ${argv[i]}`);
    }
    f[k] = argv[i + 1];
  }
  if (!f.session || !f.tool) usage("--session and --tool are required");
  if (!f.nkey && !f.creds) f.nkey = ".jingwei/auth/agent.nk";
  return f;
}

function usage(msg) {
  process.stderr.write(`agent.js: ${msg}\n`);
  process.exit(2);
}

function refuse(code, message) {
  process.stdout.write(JSON.stringify({ error: { code, message } }) + "\n");
  process.exit(3);
}

async function main() {
  const f = flags(process.argv.slice(2));
  const authenticator = f.creds
    ? credsAuthenticator(fs.readFileSync(f.creds))
    : nkeyAuthenticator(new TextEncoder().encode(fs.readFileSync(f.nkey, "utf8").trim()));
  const nc = await connect({ servers: f.server.split(","), authenticator, name: "jingwei node agent" });
  const jc = JSONCodec();
  // §5.5: the tool request. request_id makes a re-sent request run once.
  const request = {
    v: 1,
    request_id: f["request-id"] || "r-" + crypto.randomUUID(),
    session: f.session,
    task: f.task,
    tool: f.tool,
    arguments: JSON.parse(f.args),
  };
  let msg;
  try {
    msg = await nc.request("jw.api.call", jc.encode(request), { timeout: Number(f.timeout) });
  } catch (err) {
    await nc.close();
    // Say which: a role that may not call it, nothing answering, no time.
    const code = err.code === "PERMISSIONS_VIOLATION" ? "permission_denied"
      : err.code === "503" ? "no_service" : "no_answer";
    refuse(code, `jw.api.call: ${err.message}`);
  }
  await nc.close();
  // §5.7: a refusal is {"error":{…}} with the micro error headers set.
  const body = jc.decode(msg.data);
  if (msg.headers && msg.headers.get("Nats-Service-Error-Code")) {
    process.stdout.write(JSON.stringify(body) + "\n");
    process.exit(3);
  }
  // §13: the answer is the call's tool.result event.
  process.stdout.write(JSON.stringify(body) + "\n");
  const status = body.result && body.result.status;
  process.exit(status === "ok" ? 0 : 3);
}

main().catch((err) => {
  process.stderr.write(`agent.js: ${err.stack || err}\n`);
  process.exit(1);
});
