// Preloaded into peer/fastroom.mjs (`node --import <this> fastroom.mjs …`) by
// bench/_peer.py: fastroom listens on port 0; with FASTROOM_FIXED_PORT set, this
// makes it listen on that port instead, so a killed room can be restarted on
// the same address (bench_storm.py). fastroom.mjs itself is unchanged.
import net from "node:net";

const fixed = Number(process.env.FASTROOM_FIXED_PORT || 0);
if (fixed) {
  const listen = net.Server.prototype.listen;
  net.Server.prototype.listen = function listenOnFixedPort(options, ...rest) {
    if (options && typeof options === "object" && options.port === 0) {
      return listen.call(this, { ...options, port: fixed }, ...rest);
    }
    return listen.call(this, options, ...rest);
  };
}
