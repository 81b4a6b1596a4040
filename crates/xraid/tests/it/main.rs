//! One integration-test binary that drives the real `xraid` binary and real tools
//! (mdadm, xz, sha256sum; for `xraid serve`, NBD clients: qemu-img, libnbd's tools,
//! fio, and a hand-written raw client). Each test works in its own temporary folder.

mod nbd_raw;
mod server;
mod util;

mod bad_input;
mod badblocks;
mod bitmap;
mod block_devices;
mod control;
mod crash_loop;
mod create_degraded;
mod create_examine;
mod fault_injection;
mod fixtures;
mod forced_start;
mod initial_resync;
mod integrity;
mod members;
mod nbd_bad_input;
mod nbd_clients;
mod nbd_faults;
mod nbd_handshake;
mod nbd_tls;
mod offline_safety;
mod replace;
mod reporting;
mod review_initial_resync;
mod roundtrip;
mod scrub;
mod serve_output;
mod sim;
