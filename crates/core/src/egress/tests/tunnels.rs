//! A tunnel's data path: every byte both ways at once (spliced, and through the buffer used
//! where no pipe can be had), and the relay port handed over as a socket on the handoff socket.

use std::io::Write;

use super::*;

/// A host that sends `n` bytes of a pattern while it reads everything sent to it, then reports
/// a checksum of what it read.
async fn source_and_sink(n: usize) -> (u16, tokio::sync::oneshot::Receiver<(usize, u64)>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let (conn, _) = listener.accept().await.unwrap();
        let (mut rd, mut wr) = conn.into_split();
        let send = tokio::spawn(async move {
            wr.write_all(&pattern(n, 7)).await.unwrap();
            wr.shutdown().await.unwrap();
        });
        let mut got = Vec::new();
        rd.read_to_end(&mut got).await.unwrap();
        send.await.unwrap();
        let _ = tx.send((got.len(), checksum(&got)));
    });
    (port, rx)
}

fn pattern(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed;
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 56) as u8
        })
        .collect()
}

fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x100000001b3)
    })
}

/// 8 MiB each way at once through a `CONNECT` tunnel, then both ends closed: every byte arrives
/// in order and the record counts them.
async fn carries_every_byte_both_ways() {
    const N: usize = 8 << 20;
    let (port, host_read) = source_and_sink(N).await;
    let h = Harness::start(
        allow(&["127.0.0.1"], &["127.0.0.1/32"]),
        refused(),
        ProxyLimits::default(),
    );
    let conn = h.connect().await;
    let (mut rd, mut wr) = conn.into_split();
    wr.write_all(format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut ok = vec![0u8; CONNECT_OK_LEN];
    rd.read_exact(&mut ok).await.unwrap();
    assert!(ok.starts_with(b"HTTP/1.1 200"));
    let up = pattern(N, 3);
    let sent = checksum(&up);
    let send = tokio::spawn(async move {
        wr.write_all(&up).await.unwrap();
        wr.shutdown().await.unwrap();
    });
    let mut down = Vec::new();
    tokio::time::timeout(Duration::from_secs(60), rd.read_to_end(&mut down))
        .await
        .expect("the tunnel ended")
        .unwrap();
    send.await.unwrap();
    assert_eq!(down.len(), N);
    assert!(down == pattern(N, 7), "the host's bytes arrived as sent");
    assert_eq!(
        host_read.await.unwrap(),
        (N, sent),
        "the command's bytes arrived as sent"
    );
    let records = h.records(1).await;
    assert_eq!(
        (records[0].bytes_up, records[0].bytes_down),
        (N as u64, N as u64)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spliced_tunnel_carries_every_byte_both_ways_at_once() {
    carries_every_byte_both_ways().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_pipes_the_buffered_tunnel_carries_every_byte_both_ways_at_once() {
    super::pump::FORCE_BUFFER.store(true, Ordering::Relaxed);
    carries_every_byte_both_ways().await;
}

/// The handoff socket takes one link and is then gone; on that link only a listening TCP
/// socket is served, anything else handed over is closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_port_handed_over_is_served_and_anything_else_is_closed() {
    let (port, accepted) = echo_server().await;
    let h = Harness::start(
        allow(&["127.0.0.1"], &["127.0.0.1/32"]),
        refused(),
        ProxyLimits::default(),
    );
    // The one link the proxy takes is the harness's: its socket is gone, no second one is had.
    let handoff = h.proxy.handoff_socket().to_path_buf();
    for _ in 0..200 {
        if !handoff.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        !handoff.exists(),
        "the handoff socket outlived its one link"
    );
    assert!(std::os::unix::net::UnixStream::connect(&handoff).is_err());
    let link = &h.link;
    // Not a listening TCP socket: the read end of a pipe, then a connected TCP socket; the
    // proxy must close both, not serve them.
    let (pipe_rd, mut pipe_wr) = std::io::pipe().unwrap();
    hand_over(link, &pipe_rd);
    drop(pipe_rd);
    let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut stray = std::net::TcpStream::connect(other.local_addr().unwrap()).unwrap();
    let (stray_peer, _) = other.accept().unwrap();
    hand_over(link, &stray_peer);
    drop(stray_peer);
    // The relay port, as the holder bound it on the namespace's loopback.
    let relay = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let relay_addr = relay.local_addr().unwrap();
    hand_over(link, &relay);
    drop(relay);
    let echoed = tokio::task::spawn_blocking(move || {
        use std::io::Read;
        let mut command = std::net::TcpStream::connect(relay_addr).unwrap();
        command
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        command
            .write_all(format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\nhello").as_bytes())
            .unwrap();
        let mut got = vec![0u8; CONNECT_OK_LEN + 5];
        command.read_exact(&mut got).unwrap();
        // The stray connection was closed unserved: its peer reads the end.
        stray
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut rest = Vec::new();
        let stray_read = stray.read_to_end(&mut rest);
        (
            String::from_utf8_lossy(&got).into_owned(),
            stray_read.ok(),
            rest,
            command,
        )
    })
    .await
    .unwrap();
    assert_eq!(echoed.0, "HTTP/1.1 200 Connection established\r\n\r\nhello");
    assert_eq!(
        (echoed.1, echoed.2),
        (Some(0), Vec::new()),
        "closed, never answered"
    );
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
    // Every read end is closed once the proxy dropped the one handed over.
    let mut closed = false;
    for _ in 0..500 {
        if pipe_wr.write(b"x").is_err() {
            closed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(closed, "the pipe handed over was closed, not kept");
    assert_eq!(
        h.proxy.open_connections(),
        1,
        "only the relay's connection is served (its tunnel still open)"
    );
    drop(echoed.3);
}
