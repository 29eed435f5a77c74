//! The one receive edge: UDP sockets with the kernel's receive timestamps (`SO_TIMESTAMPNS`,
//! `CLOCK_REALTIME`) and the `recvmsg` that reads them. `recv` ([`crate::transport::io`]), the
//! loopback replay ([`crate::wlan::live`]) and the veth receive paths ([`crate::testbed`]) all
//! receive through here; the socket options they need (buffer, busy polling, read timeout) are
//! set here and nowhere else. `aggrate watch` listens on an interface through a packet socket
//! ([`PacketSocket`]) stamped the same way.
//!
//! No clock is read: a datagram the kernel did not stamp comes back without a time, and the
//! caller decides (the live receiver falls back to the clock; the replays drop it).

use std::io::IoSliceMut;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use nix::sys::socket::{recvmsg, setsockopt, sockopt, ControlMessageOwned, MsgFlags, SockaddrStorage};

use crate::time::Ts;

/// A socket step failed.
#[derive(Debug, thiserror::Error)]
#[error("{what}: {source}")]
pub struct Error {
    /// Which step.
    pub what: &'static str,
    /// The error.
    pub source: std::io::Error,
}

fn step(what: &'static str) -> impl FnOnce(std::io::Error) -> Error {
    move |source| Error { what, source }
}

/// How a timestamped socket is set up.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Receive buffer (bytes); best effort, capped by `net.core.rmem_max` unless `force`.
    pub rcvbuf: usize,
    /// Set the buffer with `SO_RCVBUFFORCE` (root), past `rmem_max`: the testbed's paths must
    /// not drop in the socket, or the loss is ours and not the path's.
    pub force: bool,
    /// `SO_BUSY_POLL` (µs; 0: off).
    pub busy_poll_us: u32,
    /// Read timeout (None: block).
    pub read_timeout: Option<Duration>,
    /// Hand each IPv4 datagram's TOS byte up too (`IP_RECVTOS`): the testbed's AP marks
    /// A-MPDUs there (`Downlink::set_ampdu_marks`).
    pub tos: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            rcvbuf: 8 << 20,
            force: false,
            busy_poll_us: 0,
            read_timeout: None,
            tos: false,
        }
    }
}

/// A UDP socket bound to `addr` with kernel receive timestamps on and `o` applied.
pub fn bind(addr: SocketAddr, o: &Options) -> Result<UdpSocket, Error> {
    let s = UdpSocket::bind(addr).map_err(step("binding the receiver"))?;
    setsockopt(&s, sockopt::ReceiveTimestampns, &true).map_err(|e| step("SO_TIMESTAMPNS")(e.into()))?;
    set_rcvbuf(&s, o.rcvbuf, o.force);
    if o.busy_poll_us > 0 {
        set_busy_poll(&s, o.busy_poll_us).map_err(step("SO_BUSY_POLL"))?;
    }
    s.set_read_timeout(o.read_timeout).map_err(step("receiver timeout"))?;
    if o.tos {
        setsockopt(&s, sockopt::IpRecvTos, &true).map_err(|e| step("IP_RECVTOS")(e.into()))?;
    }
    Ok(s)
}

/// A larger receive buffer, best effort (a smaller one still works; losses then say so).
pub fn set_rcvbuf(s: &impl std::os::fd::AsFd, bytes: usize, force: bool) {
    let _ = if force {
        setsockopt(s, sockopt::RcvBufForce, &bytes)
    } else {
        setsockopt(s, sockopt::RcvBuf, &bytes)
    };
}

/// One datagram as received.
#[derive(Clone, Copy, Debug)]
pub struct Datagram {
    /// Bytes received into the buffer.
    pub len: usize,
    /// Its source.
    pub from: SocketAddr,
    /// The kernel's receive time (`CLOCK_REALTIME`), when it stamped one.
    pub kernel: Option<Ts>,
    /// The IPv4 TOS byte, when the socket asked for it ([`Options::tos`]).
    pub tos: Option<u8>,
}

/// Receives with kernel timestamps on one socket, its control-message buffer reused.
pub struct StampedReceiver<'s> {
    sock: &'s UdpSocket,
    cmsg: Vec<u8>,
}

impl<'s> StampedReceiver<'s> {
    /// Over `sock` (made by [`bind`], or with `SO_TIMESTAMPNS` on).
    pub fn new(sock: &'s UdpSocket) -> Self {
        StampedReceiver {
            sock,
            cmsg: nix::cmsg_space!(nix::sys::time::TimeSpec, u32),
        }
    }

    /// One datagram into `buf`; `Ok(None)` on timeout, would-block or an interrupted call.
    pub fn recv(&mut self, buf: &mut [u8]) -> Result<Option<Datagram>, Error> {
        let mut iov = [IoSliceMut::new(buf)];
        match recvmsg::<SockaddrStorage>(self.sock.as_raw_fd(), &mut iov, Some(&mut self.cmsg), MsgFlags::empty()) {
            Ok(msg) => {
                let st = stamps(&msg);
                let from = msg
                    .address
                    .and_then(|a| {
                        a.as_sockaddr_in()
                            .map(|v| SocketAddr::from((v.ip(), v.port())))
                            .or_else(|| a.as_sockaddr_in6().map(|v| SocketAddr::from((v.ip(), v.port()))))
                    })
                    .unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)));
                Ok(Some(Datagram {
                    len: msg.bytes,
                    from,
                    kernel: st.kernel,
                    tos: st.tos,
                }))
            }
            Err(nix::errno::Errno::EAGAIN) | Err(nix::errno::Errno::EINTR) => Ok(None),
            Err(e) => Err(step("recvmsg")(e.into())),
        }
    }

    /// The replays' loop: every datagram of at least 4 bytes that the kernel stamped, as
    /// (its first 4 bytes as a big-endian sequence number, kernel ns), until `stop` is set and
    /// a read then times out (the socket needs a read timeout). At most `cap` are kept.
    pub fn collect_seq(&mut self, buf_len: usize, stop: &AtomicBool, cap: usize) -> Vec<(u32, u64)> {
        let mut got = Vec::with_capacity(cap.min(1 << 24));
        let mut buf = vec![0u8; buf_len.max(64)];
        loop {
            match self.recv(&mut buf) {
                Ok(Some(d)) => {
                    if let (Some(t), true, true) = (d.kernel, d.len >= 4, got.len() < cap) {
                        got.push((u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]), t.0));
                    }
                }
                _ => {
                    if stop.load(Ordering::Acquire) {
                        break;
                    }
                }
            }
        }
        got
    }
}

/// One packet a [`PacketSocket`] read.
#[derive(Clone, Copy, Debug)]
pub struct Packet {
    /// Bytes received into the buffer (from the network-layer header on).
    pub len: usize,
    /// The kernel's receive time (`CLOCK_REALTIME`), when it stamped one.
    pub kernel: Option<Ts>,
    /// The interface sent it (a packet socket sees both directions): not a received packet.
    pub outgoing: bool,
    /// Packets the socket dropped so far because its buffer was full (`SO_RXQ_OVFL`), when the
    /// kernel said.
    pub dropped: Option<u32>,
}

/// A packet socket (`AF_PACKET`, cooked: no link header, so Ethernet, TUN and Wi-Fi devices
/// read alike) on one interface, every protocol, with kernel receive timestamps: the time the
/// kernel stamps at `netif_receive_skb`, where a UDP socket's `SO_TIMESTAMPNS` comes from too,
/// so a watcher sees the times `recv` would. Needs `CAP_NET_RAW`.
pub struct PacketSocket {
    fd: std::os::fd::OwnedFd,
    ifindex: u32,
    cmsg: Vec<u8>,
}

impl PacketSocket {
    /// Listen on `iface`, with `o`'s buffer and read timeout (busy polling does not apply).
    pub fn open(iface: &str, o: &Options) -> Result<PacketSocket, Error> {
        use nix::sys::socket::{socket, AddressFamily, SockFlag, SockProtocol, SockType};
        let ifindex = nix::net::if_::if_nametoindex(iface).map_err(|e| Error {
            what: "finding the interface (ip link lists them)",
            source: e.into(),
        })?;
        let fd = socket(
            AddressFamily::Packet,
            SockType::Datagram,
            SockFlag::SOCK_CLOEXEC,
            SockProtocol::EthAll,
        )
        .map_err(|e| Error {
            what: if e == nix::errno::Errno::EPERM {
                "opening a packet socket (needs root or CAP_NET_RAW)"
            } else {
                "opening a packet socket"
            },
            source: e.into(),
        })?;
        bind_packet(&fd, ifindex).map_err(step("binding the packet socket to the interface"))?;
        setsockopt(&fd, sockopt::ReceiveTimestampns, &true).map_err(|e| step("SO_TIMESTAMPNS")(e.into()))?;
        // The socket's drops are counted and said: a watcher that misses packets reads a
        // lower packet rate, and so a lower level.
        let _ = setsockopt(&fd, sockopt::RxqOvfl, &1);
        set_rcvbuf(&fd, o.rcvbuf, o.force);
        if let Some(t) = o.read_timeout {
            let tv = nix::sys::time::TimeVal::new(t.as_secs().min(i64::MAX as u64) as _, t.subsec_micros() as _);
            setsockopt(&fd, sockopt::ReceiveTimeout, &tv).map_err(|e| step("receive timeout")(e.into()))?;
        }
        Ok(PacketSocket {
            fd,
            ifindex,
            cmsg: nix::cmsg_space!(nix::sys::time::TimeSpec, u32),
        })
    }

    /// One packet into `buf` (cut to its length); `Ok(None)` on timeout, would-block, an
    /// interrupted call, or a packet of another interface (read before the bind took).
    pub fn recv(&mut self, buf: &mut [u8]) -> Result<Option<Packet>, Error> {
        let mut iov = [IoSliceMut::new(buf)];
        match recvmsg::<SockaddrStorage>(self.fd.as_raw_fd(), &mut iov, Some(&mut self.cmsg), MsgFlags::empty()) {
            Ok(msg) => {
                let Stamps { kernel, dropped, .. } = stamps(&msg);
                let link = msg.address.as_ref().and_then(|a| a.as_link_addr());
                if link.is_some_and(|l| l.ifindex() != self.ifindex as usize) {
                    return Ok(None);
                }
                Ok(Some(Packet {
                    len: msg.bytes,
                    kernel,
                    outgoing: link.is_some_and(|l| l.pkttype() == libc::PACKET_OUTGOING),
                    dropped,
                }))
            }
            Err(nix::errno::Errno::EAGAIN) | Err(nix::errno::Errno::EINTR) => Ok(None),
            Err(e) => Err(step("recvmsg on the packet socket")(e.into())),
        }
    }
}

/// What a received message's control messages said.
struct Stamps {
    /// The kernel's receive time.
    kernel: Option<Ts>,
    /// The socket's drop count so far (`SO_RXQ_OVFL`).
    dropped: Option<u32>,
    /// The IPv4 TOS byte (`IP_RECVTOS`).
    tos: Option<u8>,
}

fn stamps(msg: &nix::sys::socket::RecvMsg<'_, '_, SockaddrStorage>) -> Stamps {
    let mut st = Stamps {
        kernel: None,
        dropped: None,
        tos: None,
    };
    if let Ok(cm) = msg.cmsgs() {
        for c in cm {
            match c {
                ControlMessageOwned::ScmTimestampns(t) => {
                    st.kernel = Some(Ts(t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64))
                }
                ControlMessageOwned::RxqOvfl(n) => st.dropped = Some(n),
                ControlMessageOwned::Ipv4Tos(t) => st.tos = Some(t),
                _ => {}
            }
        }
    }
    st
}

/// Bind a packet socket to one interface: nix builds no `sockaddr_ll` from an index.
#[allow(unsafe_code)]
fn bind_packet(fd: &std::os::fd::OwnedFd, ifindex: u32) -> std::io::Result<()> {
    let a = libc::sockaddr_ll {
        sll_family: libc::AF_PACKET as u16,
        sll_protocol: (libc::ETH_P_ALL as u16).to_be(),
        sll_ifindex: ifindex.min(i32::MAX as u32) as i32,
        sll_hatype: 0,
        sll_pkttype: 0,
        sll_halen: 0,
        sll_addr: [0; 8],
    };
    // SAFETY: a valid socket fd, a pointer to a live sockaddr_ll and its size; bind reads it
    // during the call only.
    let r = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            &a as *const libc::sockaddr_ll as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// `SO_BUSY_POLL` (µs): nix has no wrapper for it.
#[allow(unsafe_code)]
fn set_busy_poll(s: &UdpSocket, us: u32) -> std::io::Result<()> {
    let v: libc::c_int = us.min(i32::MAX as u32) as libc::c_int;
    // SAFETY: a valid socket fd, a pointer to a live c_int and its size.
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_BUSY_POLL,
            &v as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_and_sources_over_loopback() {
        let o = Options {
            read_timeout: Some(Duration::from_millis(50)),
            ..Options::default()
        };
        let rx = bind("127.0.0.1:0".parse().unwrap(), &o).unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = rx.local_addr().unwrap();
        for seq in [7u32, 8, 9] {
            let mut b = seq.to_be_bytes().to_vec();
            b.extend_from_slice(&[0; 20]);
            tx.send_to(&b, to).unwrap();
        }
        tx.send_to(&[1, 2], to).unwrap(); // too short for a sequence number
        let mut r = StampedReceiver::new(&rx);
        let mut buf = [0u8; 64];
        let d = r.recv(&mut buf).unwrap().expect("a datagram");
        assert_eq!((d.len, d.from), (24, tx.local_addr().unwrap()));
        assert!(d.kernel.is_some_and(|t| t.0 > 1_600_000_000 * 1_000_000_000), "{d:?}");
        let stop = AtomicBool::new(true);
        let got = r.collect_seq(64, &stop, 10);
        assert_eq!(got.iter().map(|g| g.0).collect::<Vec<_>>(), [8, 9]);
        // Kernel stamps on the same clock as the first datagram's (CLOCK_REALTIME: a clock step
        // between two datagrams can reorder them, so no order is asserted — it failed once on a
        // host whose clock was being slewed).
        let first = d.kernel.unwrap().0 as i128;
        for g in &got {
            assert!((g.1 as i128 - first).abs() < 10_000_000_000, "{got:?} vs {first}");
        }
        // Nothing more: a timeout is no error.
        assert!(r.recv(&mut buf).unwrap().is_none());
    }
}
