//! The integration tests that run in real time (real kernel receive paths in network namespaces,
//! live loops and relays over loopback sockets, the transport attacked over them): a binary of
//! their own, which cargo runs apart from (never beside) the CPU-bound suite, so the host's clock
//! and cores are theirs. Among themselves they take turns by file (`common::room`): a file's
//! tests may share the room, as they did when each file was a binary of its own; another file's
//! wait.

#[path = "../common/mod.rs"]
mod common;

mod attacks;
mod impair;
mod kernel_replay;
mod live_loop;
mod testbed;
