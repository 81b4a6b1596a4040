//! One integration-test binary that drives the real `xraid` binary and real tools
//! (mdadm, xz, sha256sum). Each test works in its own temporary folder.

mod util;

mod bad_input;
mod create_examine;
mod fixtures;
mod roundtrip;
