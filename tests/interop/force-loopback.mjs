// Preload for Node servers that bind every interface (server-everything's streamableHttp/sse modes do):
// any listen() on a TCP port without an explicit host binds 127.0.0.1 instead, so test traffic stays on loopback.
//
// usage: NODE_OPTIONS="--import /abs/path/tests/interop/force-loopback.mjs" node <server> ...
//
// Covers listen(port[, backlog][, cb]), listen("port"), listen() / listen(cb) (ephemeral port) and
// listen({port}) without host; Unix-socket / named-pipe listens (path) and explicit hosts are left alone.
import net from "node:net";

const LOOPBACK = "127.0.0.1";
const orig = net.Server.prototype.listen;

net.Server.prototype.listen = function (...args) {
  const a0 = args[0];
  if (a0 === undefined || typeof a0 === "function") {
    // listen() or listen(cb): an ephemeral port on all interfaces -> on loopback
    args.splice(0, a0 === undefined ? 1 : 0, 0, LOOPBACK);
  } else if (typeof a0 === "number" || (typeof a0 === "string" && /^\d+$/.test(a0))) {
    if (typeof args[1] !== "string") args.splice(1, 0, LOOPBACK);
  } else if (a0 && typeof a0 === "object" && !a0.path && !a0.host && !(a0 instanceof net.Server) && !("fd" in a0) && !("_handle" in a0)) {
    args[0] = { ...a0, host: LOOPBACK };
  }
  return orig.apply(this, args);
};
