//! The client's end of a TCP connection, found by its four addresses: through
//! `NETLINK_SOCK_DIAG` (`inet_diag`, one exact lookup: the socket's inode and, from Linux 5.7,
//! the id of the cgroup v2 group it was created in), else through `/proc/net/tcp` and
//! `/proc/net/tcp6` (the inode only).

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use rustix::net::{
    AddressFamily, RecvFlags, SendFlags, SocketFlags, SocketType, netlink, recv, send, socket_with,
    sockopt,
};

/// `SOCK_DIAG_BY_FAMILY`.
const SOCK_DIAG_BY_FAMILY: u16 = 20;
/// `NLM_F_REQUEST`.
const NLM_F_REQUEST: u16 = 1;
/// `NLMSG_ERROR`.
const NLMSG_ERROR: u16 = 2;
/// `INET_DIAG_CGROUP_ID`.
const INET_DIAG_CGROUP_ID: u16 = 21;
/// `sizeof(struct nlmsghdr)`.
const NLMSG_HDR: usize = 16;
/// `sizeof(struct inet_diag_msg)`.
const INET_DIAG_MSG: usize = 72;
/// How long the kernel may take to answer.
const ANSWER_WAIT: Duration = Duration::from_secs(2);

/// What the kernel says about the client's socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ClientSocket {
    /// The socket's inode (`socket:[N]` in its holders' `/proc/<pid>/fd`); `0` when unknown.
    pub(super) inode: u64,
    /// The cgroup v2 group it was created in, when the kernel reports it.
    pub(super) cgroup_id: Option<u64>,
}

/// The client's socket of the connection `client` → `local`, through `NETLINK_SOCK_DIAG`.
pub(super) fn client_socket(client: SocketAddr, local: SocketAddr) -> io::Result<ClientSocket> {
    let fd = socket_with(
        AddressFamily::NETLINK,
        SocketType::RAW,
        SocketFlags::CLOEXEC,
        Some(netlink::SOCK_DIAG),
    )?;
    sockopt::set_socket_timeout(&fd, sockopt::Timeout::Recv, Some(ANSWER_WAIT))?;
    send(&fd, &request(client, local), SendFlags::empty())?;
    let mut answer = vec![0u8; 8192];
    let (n, _) = recv(&fd, &mut answer[..], RecvFlags::empty())?;
    parse_answer(&answer[..n])
}

/// The `inet_diag_req_v2` asking for the one TCP socket whose source is `client` and
/// destination `local`.
fn request(client: SocketAddr, local: SocketAddr) -> Vec<u8> {
    let family: u8 = match client.ip() {
        IpAddr::V4(_) => 2,
        IpAddr::V6(_) => 10,
    };
    let mut m = Vec::with_capacity(NLMSG_HDR + 56);
    m.extend_from_slice(&((NLMSG_HDR + 56) as u32).to_ne_bytes());
    m.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    m.extend_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    m.extend_from_slice(&1u32.to_ne_bytes()); // seq
    m.extend_from_slice(&0u32.to_ne_bytes()); // pid: the kernel
    m.extend_from_slice(&[family, 6 /* IPPROTO_TCP */, 0, 0]);
    m.extend_from_slice(&u32::MAX.to_ne_bytes()); // every state
    // inet_diag_sockid: ports and addresses in network order.
    m.extend_from_slice(&client.port().to_be_bytes());
    m.extend_from_slice(&local.port().to_be_bytes());
    m.extend_from_slice(&address_words(client.ip()));
    m.extend_from_slice(&address_words(local.ip()));
    m.extend_from_slice(&0u32.to_ne_bytes()); // any interface
    m.extend_from_slice(&[0xff; 8]); // INET_DIAG_NOCOOKIE
    m
}

/// An address as the four 32-bit words of `inet_diag_sockid` (IPv4 in the first).
fn address_words(ip: IpAddr) -> [u8; 16] {
    let mut words = [0u8; 16];
    match ip {
        IpAddr::V4(v4) => words[..4].copy_from_slice(&v4.octets()),
        IpAddr::V6(v6) => words.copy_from_slice(&v6.octets()),
    }
    words
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn truncated() -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, "a truncated sock_diag answer")
}

/// The socket an answer describes, or the error it carries.
fn parse_answer(b: &[u8]) -> io::Result<ClientSocket> {
    let len = u32_at(b, 0).ok_or_else(truncated)? as usize;
    let kind = u16_at(b, 4).ok_or_else(truncated)?;
    let b = b.get(..len).ok_or_else(truncated)?;
    if kind == NLMSG_ERROR {
        let errno = u32_at(b, NLMSG_HDR).ok_or_else(truncated)? as i32;
        return Err(io::Error::from_raw_os_error(-errno));
    }
    if kind != SOCK_DIAG_BY_FAMILY {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("an unexpected sock_diag answer of type {kind}"),
        ));
    }
    let msg = NLMSG_HDR;
    let inode = u64::from(u32_at(b, msg + 68).ok_or_else(truncated)?);
    let mut cgroup_id = None;
    let mut at = msg + INET_DIAG_MSG;
    while let (Some(attr_len), Some(attr_type)) = (u16_at(b, at), u16_at(b, at + 2)) {
        let attr_len = usize::from(attr_len);
        if attr_len < 4 {
            break;
        }
        if attr_type == INET_DIAG_CGROUP_ID
            && let Some(value) = b.get(at + 4..at + 12)
        {
            cgroup_id = value.try_into().ok().map(u64::from_ne_bytes);
        }
        at += (attr_len + 3) & !3;
    }
    Ok(ClientSocket { inode, cgroup_id })
}

/// The client's socket from `/proc/net/tcp` or `/proc/net/tcp6` (no cgroup id there).
pub(super) fn client_socket_from_proc(
    client: SocketAddr,
    local: SocketAddr,
) -> io::Result<ClientSocket> {
    let file = match client.ip() {
        IpAddr::V4(_) => "/proc/net/tcp",
        IpAddr::V6(_) => "/proc/net/tcp6",
    };
    let table = std::fs::read_to_string(file)?;
    find_in_table(&table, client, local).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("no socket {client} -> {local} in {file}"),
        )
    })
}

/// The row of a `/proc/net/tcp*` table whose local address is `client` and remote `local`.
fn find_in_table(table: &str, client: SocketAddr, local: SocketAddr) -> Option<ClientSocket> {
    let (want_local, want_remote) = (proc_address(client), proc_address(local));
    table.lines().skip(1).find_map(|row| {
        let fields: Vec<&str> = row.split_whitespace().collect();
        let (own, remote, inode) = (fields.get(1)?, fields.get(2)?, fields.get(9)?);
        (own.eq_ignore_ascii_case(&want_local) && remote.eq_ignore_ascii_case(&want_remote)).then(
            || {
                Some(ClientSocket {
                    inode: inode.parse().ok()?,
                    cgroup_id: None,
                })
            },
        )?
    })
}

/// An address as `/proc/net/tcp*` prints it: each 32-bit word of the address in host order,
/// in hex, then `:` and the port in hex.
fn proc_address(addr: SocketAddr) -> String {
    let words: Vec<String> = match addr.ip() {
        IpAddr::V4(v4) => vec![format!("{:08X}", u32::from_ne_bytes(v4.octets()))],
        IpAddr::V6(v6) => v6
            .octets()
            .chunks_exact(4)
            .map(|w| format!("{:08X}", u32::from_ne_bytes([w[0], w[1], w[2], w[3]])))
            .collect(),
    };
    format!("{}:{:04X}", words.concat(), addr.port())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel finds the test's own client socket both ways, with the same inode.
    #[test]
    fn a_loopback_client_is_found_by_netlink_and_in_proc() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let local = listener.local_addr().unwrap();
        let client = std::net::TcpStream::connect(local).unwrap();
        let (_accepted, peer) = listener.accept().unwrap();
        assert_eq!(peer, client.local_addr().unwrap());
        let from_proc = client_socket_from_proc(peer, local).unwrap();
        assert_ne!(from_proc.inode, 0);
        let found = client_socket(peer, local).unwrap();
        assert_eq!(
            found.inode, from_proc.inode,
            "the client's socket, not ours"
        );
        let own_group = std::fs::read_to_string("/proc/self/cgroup").unwrap();
        if own_group.lines().any(|l| l.starts_with("0::")) {
            assert!(
                found.cgroup_id.is_some(),
                "Linux 5.7+ reports the cgroup id"
            );
        }
        let gone: SocketAddr = "127.0.0.1:1".parse().unwrap();
        assert!(client_socket(gone, local).is_err());
        assert!(client_socket_from_proc(gone, local).is_err());
    }

    #[test]
    fn proc_addresses_are_host_order_words() {
        let v4: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        let expected = if cfg!(target_endian = "little") {
            "0100007F:1F90"
        } else {
            "7F000001:1F90"
        };
        assert_eq!(proc_address(v4), expected);
        let table = format!(
            "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
             0: {expected} {} 01 00000000:00000000 00:00000000 00000000     0        0 4242 1\n",
            proc_address("127.0.0.1:7878".parse().unwrap())
        );
        assert_eq!(
            find_in_table(&table, v4, "127.0.0.1:7878".parse().unwrap()),
            Some(ClientSocket {
                inode: 4242,
                cgroup_id: None
            })
        );
        assert_eq!(find_in_table(&table, v4, v4), None);
    }
}
