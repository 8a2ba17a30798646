#!/usr/bin/env node
// A remote assignor for the Connect Group Coordinator, in Node.js: the `ConnectAssignor` gRPC
// service (Assign + ListAssignors) loaded at run time from the repository's .proto files.
//
//   node assignor.js [--listen 127.0.0.1:0] [--names round-robin-js[,more-names]]
//                    [--versions 0-0] [--proto-dir ../../../proto]
//
// Prints "round-robin-js assignor listening on HOST:PORT" once it serves (port 0 picks a free one).
// Every name in --names is served with the same algorithm and version range.
//
// The algorithm, "balanced sticky round-robin": every connector and task goes to exactly one
// member; each member gets floor(n/m) or ceil(n/m) items; an item stays with the member the
// current target gave it to while that member is still in the group and under its quota; the
// rest are dealt round-robin over the members sorted by id. No item is ever held back
// (rebalance_delay_ms is always 0). See docs/remote-assignors.md for the contract.

"use strict";

const path = require("node:path");
const grpc = require("@grpc/grpc-js");
const protoLoader = require("@grpc/proto-loader");

// Error codes (connect.coordinator.v1.ErrorCode): in-band, never a gRPC status.
const NONE = 0;
const INVALID_REQUEST = 42;
const UNSUPPORTED_ASSIGNOR = 112;

function parseArgs(argv) {
  const opts = {
    listen: process.env.ASSIGNOR_LISTEN || "127.0.0.1:8481",
    names: (process.env.ASSIGNOR_NAMES || "round-robin-js").split(","),
    versions: process.env.ASSIGNOR_VERSIONS || "0-0",
    protoDir: process.env.ASSIGNOR_PROTO_DIR || path.resolve(__dirname, "..", "..", "..", "proto"),
  };
  for (let i = 0; i < argv.length; i += 2) {
    const [flag, value] = [argv[i], argv[i + 1]];
    if (value === undefined) throw new Error(`${flag} needs a value`);
    if (flag === "--listen") opts.listen = value;
    else if (flag === "--names") opts.names = value.split(",");
    else if (flag === "--versions") opts.versions = value;
    else if (flag === "--proto-dir") opts.protoDir = value;
    else throw new Error(`unknown flag ${flag}`);
  }
  opts.names = opts.names.map((n) => n.trim()).filter((n) => n);
  if (opts.names.length === 0) throw new Error("--names lists no name");
  const m = /^(\d+)(?:-(\d+))?$/.exec(opts.versions);
  if (!m) throw new Error(`--versions must be MIN-MAX, got ${opts.versions}`);
  opts.minimumVersion = Number(m[1]);
  opts.maximumVersion = Number(m[2] ?? m[1]);
  if (opts.minimumVersion > opts.maximumVersion) throw new Error(`--versions ${opts.versions}: MIN > MAX`);
  return opts;
}

const key = (item) => (typeof item === "string" ? `c:${item}` : `t:${item.connector}:${item.task}`);

// The pure algorithm: request in, response out (plain objects as proto-loader gives them).
function assign(request, served) {
  const fail = (error, message) => ({ error, error_message: message, members: [] });
  const info = served.get(request.assignor_name);
  if (!info) {
    return fail(UNSUPPORTED_ASSIGNOR, `assignor_name '${request.assignor_name}' is not served here (served: ${[...served.keys()].join(", ")})`);
  }
  const members = [...request.members].sort((a, b) => (a.member_id < b.member_id ? -1 : a.member_id > b.member_id ? 1 : 0));
  if (members.length === 0) return fail(INVALID_REQUEST, "members must not be empty");
  for (const [i, m] of members.entries()) {
    const version = m.assignor ? m.assignor.version : 0;
    if (version < info.minimumVersion || version > info.maximumVersion) {
      return fail(UNSUPPORTED_ASSIGNOR, `members[${i}].assignor.version ${version} is outside ${info.minimumVersion}-${info.maximumVersion}`);
    }
  }

  // Every item of the group, connectors first, in a stable order.
  const items = [];
  for (const c of [...request.connectors].sort((a, b) => (a.name < b.name ? -1 : 1))) {
    items.push(c.name);
    for (let t = 0; t < c.task_count; t++) items.push({ connector: c.name, task: t });
  }
  // Who the current target gives each item to (members that left are still listed there).
  const previous = new Map();
  for (const mt of (request.current_target && request.current_target.members) || []) {
    const ct = mt.connectors_and_tasks || {};
    for (const c of ct.connectors || []) previous.set(key(c), mt.member_id);
    for (const t of ct.tasks || []) previous.set(key(t), mt.member_id);
  }

  const n = items.length;
  const m = members.length;
  const quota = new Map(members.map((mem, i) => [mem.member_id, Math.floor(n / m) + (i < n % m ? 1 : 0)]));
  const out = new Map(members.map((mem) => [mem.member_id, { connectors: [], tasks: [] }]));
  const give = (memberId, item) => {
    const target = out.get(memberId);
    if (typeof item === "string") target.connectors.push(item);
    else target.tasks.push(item);
    quota.set(memberId, quota.get(memberId) - 1);
  };
  const rest = [];
  for (const item of items) {
    const owner = previous.get(key(item));
    if (owner !== undefined && quota.has(owner) && quota.get(owner) > 0) give(owner, item);
    else rest.push(item);
  }
  let next = 0;
  for (const item of rest) {
    while (quota.get(members[next % m].member_id) === 0) next++;
    give(members[next % m].member_id, item);
    next++;
  }

  // assignor_state: whatever must survive until the next run; here, how many runs there were.
  let runs = 0;
  try {
    if (request.assignor_state && request.assignor_state.length) runs = JSON.parse(request.assignor_state.toString()).runs || 0;
  } catch {
    runs = 0; // not ours (another assignor ran before): start again
  }
  return {
    error: NONE,
    error_message: "",
    members: members.map((mem) => ({
      member_id: mem.member_id,
      connectors_and_tasks: out.get(mem.member_id),
      error: 0,
      version: mem.assignor ? mem.assignor.version : 0,
      metadata: Buffer.alloc(0),
    })),
    assignor_state: Buffer.from(JSON.stringify({ runs: runs + 1 })),
    rebalance_delay_ms: 0,
  };
}

function loadService(protoDir) {
  const definition = protoLoader.loadSync("connect/coordinator/v1/assignor.proto", {
    includeDirs: [protoDir],
    keepCase: true, // field names as in the .proto (member_id, task_count, ...)
    longs: Number,
    enums: Number,
    defaults: true,
    oneofs: true,
  });
  return grpc.loadPackageDefinition(definition).connect.coordinator.v1.ConnectAssignor;
}

function main() {
  let opts;
  try {
    opts = parseArgs(process.argv.slice(2));
  } catch (e) {
    console.error(`round-robin-js assignor: ${e.message}`);
    process.exit(2);
  }
  const served = new Map(opts.names.map((name) => [name, { minimumVersion: opts.minimumVersion, maximumVersion: opts.maximumVersion }]));
  const server = new grpc.Server({
    "grpc.max_receive_message_length": 256 * 1024 * 1024,
    "grpc.max_send_message_length": 256 * 1024 * 1024,
  });
  server.addService(loadService(opts.protoDir).service, {
    Assign(call, callback) {
      let response;
      try {
        response = assign(call.request, served);
      } catch (e) {
        console.error(`Assign failed for group ${call.request.group_id}:`, e);
        response = { error: -1, error_message: `internal error: ${e.message}`, members: [] };
      }
      callback(null, response);
    },
    ListAssignors(_call, callback) {
      callback(null, {
        assignors: [...served].map(([name, v]) => ({ name, minimum_version: v.minimumVersion, maximum_version: v.maximumVersion })),
      });
    },
  });
  server.bindAsync(opts.listen, grpc.ServerCredentials.createInsecure(), (err, port) => {
    if (err) {
      console.error(`round-robin-js assignor: cannot listen on ${opts.listen}: ${err.message}`);
      process.exit(1);
    }
    const host = opts.listen.slice(0, opts.listen.lastIndexOf(":"));
    console.log(`round-robin-js assignor listening on ${host}:${port} (serving ${opts.names.join(", ")})`);
  });
  const stop = () => server.tryShutdown(() => process.exit(0));
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);
}

module.exports = { assign };

if (require.main === module) main();
