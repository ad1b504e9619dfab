//! What the kernel says of the tests' TCP sockets (IPv4, `/proc/net/tcp`):
//! the bytes a socket has received that its owner has not read yet, and a
//! listening socket's accept queue. A test waits on these (with
//! [`super::eventually`]) instead of sleeping "long enough" for the gateway
//! to have accepted or read a connection.

use std::net::{Ipv4Addr, SocketAddr};

/// One socket of `/proc/net/tcp`.
struct Entry {
    local: SocketAddr,
    remote: SocketAddr,
    listening: bool,
    /// For a listening socket, the connections in its accept queue.
    rx_queue: u64,
}

/// `0100007F:1F90` (the kernel's hex of the address as stored, then the
/// port) → `127.0.0.1:8080`.
fn address(hex: &str) -> SocketAddr {
    let (ip, port) = hex.split_once(':').unwrap();
    let ip = u32::from_str_radix(ip, 16).unwrap();
    let port = u16::from_str_radix(port, 16).unwrap();
    (Ipv4Addr::from(ip.to_le_bytes()), port).into()
}

fn entries() -> Vec<Entry> {
    let text = std::fs::read_to_string("/proc/net/tcp").unwrap();
    (text.lines().skip(1))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (_, rx) = f[4].split_once(':').unwrap();
            Entry {
                local: address(f[1]),
                remote: address(f[2]),
                listening: f[3] == "0A",
                rx_queue: u64::from_str_radix(rx, 16).unwrap(),
            }
        })
        .collect()
}

/// The bytes that arrived at `server` from `client` (one connection, seen
/// from the gateway's side) and that the gateway has not read yet; `None`
/// when there is no such socket.
pub fn unread(server: SocketAddr, client: SocketAddr) -> Option<u64> {
    (entries().into_iter())
        .find(|e| !e.listening && e.local == server && e.remote == client)
        .map(|e| e.rx_queue)
}

/// The connections waiting in the accept queue of the socket listening on
/// `listener`, not accepted yet; `None` when nothing listens there.
pub fn accept_queue(listener: SocketAddr) -> Option<u64> {
    (entries().into_iter())
        .find(|e| e.listening && e.local == listener)
        .map(|e| e.rx_queue)
}
