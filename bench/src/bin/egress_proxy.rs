//! `egress_proxy`: a `proxy` session's only way out against a direct connection, in the same
//! run. The path measured is the real one: a client inside a session's network namespace (a
//! thread of this process joined to the namespace of a real holder, `intendant-runtime
//! --hold-network --relay`) connects to the holder's loopback relay port, whose connection the
//! holder hands (as the socket itself) to the controller's egress proxy
//! (`intendant_core::egress`, its handoff socket) in the host's namespace, which decides on the host, resolves it through the trusted `hosts` map, guards the
//! address (`allow_addresses` opens 127.0.0.1 for the benchmark) and connects to an origin
//! server on the host's loopback. The direct side is the same client in the host's namespace
//! connecting to the origin itself.
//!
//! The figures, the two sides alternating round by round:
//! - 1 GiB over one connection (a `CONNECT` tunnel against a plain connection), best of
//!   [`BIG_ROUNDS`]: throughput, goal >= 0.8x direct; with each side's CPU (`getrusage` of this
//!   process, which holds the origin, the client and the proxy) per GiB, the relay's cost;
//! - the same 1 GiB from an origin behind a link shaped like a real network: a network
//!   namespace the bench makes ([`ShapedHost`]), reached over a veth pair whose both ends a
//!   `tbf` qdisc holds to [`SHAPED_RATE`], the proxy opening its address by `allow_addresses`
//!   and naming it by `hosts`; both sides cross the same link. The namespace and the pair are
//!   removed when the bench ends, on error too;
//! - 1,000 small requests, each on a connection of its own (absolute-URI `GET` through the
//!   proxy, which forwards each once), best of [`SMALL_ROUNDS`]: goal <= 1.5x direct;
//! - the runtime's start (one empty sandboxed batch) joining the session's namespace against
//!   the same start without one, median of [`START_ROUNDS`]: goal <= 1.2x.
//!
//! Beside the small requests, the floor of the extra hop: the same requests through a plain
//! relay ([`PlainRelay`]: accepted on the session's loopback by the proxy's runtime, connected
//! to the origin, bytes copied both ways, no parsing, no policy), printed, not recorded: what
//! any proxy on that path costs at least.
//!
//! `egress_proxy small [ROUNDS [own-thread]]` runs the small requests alone (direct, through
//! the proxy, through the plain relay, best of `ROUNDS`, default 10) and records nothing: the
//! step to profile (`perf record -g`, `strace -c -f`) with nothing else in the run;
//! `own-thread` serves the proxy and the relay from a single-threaded runtime on a thread of
//! their own instead of the controller's two-worker runtime.
//!
//! Needs root (the namespace is made directly and joined by a thread, which a user namespace
//! would forbid in a process with threads); otherwise its rows say unavailable. Where the
//! shaped link cannot be made (no `tc`, no `tbf`), only its row says unavailable, with why.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use intendant_bench::report::{Better, Figure};
use intendant_bench::runtime_cost::{own_cpu, rusage, rusage_cpu};
use intendant_core::egress::{
    AskOutcome, EgressHooks, EgressPolicy, EgressProxy, EgressRecord, EgressSettings, HANDOFF_NAME,
    Lookup, ProxyLimits,
};
use intendant_core::network::{HolderSpec, SESSION_NETNS_ENV, SessionNetwork};

/// Bytes of the one big transfer.
const BIG_BYTES: u64 = 1 << 30;
/// Rounds of the big transfer per side.
const BIG_ROUNDS: usize = 3;
/// Small requests per round.
const SMALL_REQUESTS: usize = 1000;
/// Rounds of the small requests per side.
const SMALL_ROUNDS: usize = 3;
/// Empty batches per side.
const START_ROUNDS: usize = 51;
/// The name the proxy is asked for (allowed, and resolved by the trusted `hosts` map).
const ORIGIN_NAME: &str = "origin.bench";
/// The name the shaped-link origin is asked for (allowed, resolved by `hosts` to its address
/// in the bench's own namespace).
const SHAPED_NAME: &str = "shaped.bench";
/// The shaped link's rate, as `tc` takes it (1 Gbit/s: a fast real network; this kernel has no
/// `netem`, so no delay is added).
const SHAPED_RATE: &str = "1gbit";
/// The small response's body.
const SMALL_BODY: &[u8] = b"ok\n";

const GOAL_BIG: f64 = 0.8;
const GOAL_SMALL: f64 = 1.5;
const GOAL_START: f64 = 1.2;

const ROWS: [(&str, &str); 5] = [
    (
        "egress_proxy_1gib",
        "1 GiB over one connection through the egress proxy",
    ),
    (
        "egress_proxy_1gib_shaped",
        "1 GiB over one connection through the egress proxy, origin behind a 1 Gbit/s link",
    ),
    (
        "egress_proxy_1gib_cpu",
        "CPU (user + system, this process) per GiB through the egress proxy on loopback",
    ),
    (
        "egress_proxy_small",
        "1,000 small requests through the egress proxy",
    ),
    (
        "egress_proxy_runtime_start",
        "one empty batch joining the session's namespace",
    ),
];

#[allow(clippy::print_stdout)] // a benchmark binary reports on stdout
fn main() -> Result<()> {
    // SAFETY: geteuid reads the process's credentials and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        for (row, measured) in ROWS {
            intendant_bench::report::unavailable(row, measured, "needs root")?;
        }
        println!("egress_proxy: needs root (the session's namespace is joined by a thread)");
        return Ok(());
    }
    let mut args = std::env::args().skip(1);
    let usage = "egress_proxy [small [ROUNDS [own-thread]]]";
    let small_only = match args.next().as_deref() {
        None => None,
        Some("small") => Some(match args.next() {
            Some(n) => n
                .parse::<usize>()
                .ok()
                .filter(|n| *n > 0)
                .with_context(|| format!("not a number of rounds: {n:?}"))?,
            None => 10,
        }),
        Some(other) => bail!("unknown argument {other:?}: {usage}"),
    };
    let own_thread = match args.next().as_deref() {
        None => false,
        Some("own-thread") => true,
        Some(other) => bail!("unknown argument {other:?}: {usage}"),
    };
    let runtime_path = intendant_bench::sibling_binary("intendant-runtime")?;
    let work = intendant_bench::work_dir()?;
    let origin = Origin::start(None, Ipv4Addr::LOCALHOST)?;
    // The shaped link: made before the proxy, whose policy must open its address. Cleaned up
    // when `shaped` drops, whatever happens after. Not made for the small requests alone.
    let shaped = match small_only.map_or_else(ShapedHost::start, |_| {
        Err(anyhow::anyhow!("not measured in this run"))
    }) {
        Ok(host) => match Origin::start(Some(&host.ns_path()), host.addr) {
            Ok(origin) => Ok((host, origin)),
            Err(e) => Err(e.context("the origin inside the shaped host")),
        },
        Err(e) => Err(e),
    };
    let mut allow_addresses = vec!["127.0.0.1/32".to_owned()];
    let mut hosts = BTreeMap::from([(ORIGIN_NAME.to_owned(), "127.0.0.1".to_owned())]);
    if let Ok((host, _)) = &shaped {
        allow_addresses.push(format!("{}/32", host.addr));
        hosts.insert(SHAPED_NAME.to_owned(), host.addr.to_string());
    }
    // The proxy's runtime: as the controller's (`intendant run`: two workers), or, with
    // `own-thread`, a single-threaded runtime on a thread of its own (what a proxy with a
    // dedicated thread would cost).
    let multi_thread;
    let async_rt = if own_thread {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let handle = runtime.handle().clone();
        // Runs until the process exits.
        std::thread::spawn(move || runtime.block_on(std::future::pending::<()>()));
        handle
    } else {
        multi_thread = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        multi_thread.handle().clone()
    };
    let settings = EgressSettings {
        allow: vec![ORIGIN_NAME.to_owned(), SHAPED_NAME.to_owned()],
        allow_addresses,
        hosts,
        ..EgressSettings::default()
    };
    let mut proxy = EgressProxy::start(
        &work.path().join(HANDOFF_NAME),
        EgressPolicy::new(&settings).map_err(anyhow::Error::msg)?,
        Arc::new(Unasked),
        ProxyLimits::default(),
        Lookup::Table(BTreeMap::new()),
        &async_rt,
    )?;
    let mut network = SessionNetwork::start(
        &HolderSpec {
            runtime_path: runtime_path.clone(),
            relay: Some(proxy.handoff_socket().to_path_buf()),
            simulate_unavailable: false,
        },
        |_| Ok(()),
    )
    .context("the session's network holder")?;
    let relay = network
        .relay_port()
        .context("the holder reported no relay port")?;
    let passed = network.netns().passed().map_err(anyhow::Error::msg)?;
    let inside = Inside::join(passed.files.last().context("no namespace descriptor")?)?;
    let plain = PlainRelay::start(&inside, &async_rt, origin.port)?;
    if let Some(rounds) = small_only {
        let small = small_rounds(&inside, relay, &plain, origin.port, rounds)?;
        network.end();
        proxy.shutdown();
        println!("egress_proxy: the small requests alone, best of {rounds}");
        print_small(&small);
        return Ok(());
    }

    let local = Target {
        name: ORIGIN_NAME,
        addr: Ipv4Addr::LOCALHOST,
        port: origin.port,
    };
    let big = big_rounds(&inside, relay, local)?;
    let big_shaped = match &shaped {
        Ok((host, shaped_origin)) => Ok(big_rounds(
            &inside,
            relay,
            Target {
                name: SHAPED_NAME,
                addr: host.addr,
                port: shaped_origin.port,
            },
        )?),
        Err(e) => Err(format!("{e:#}")),
    };
    let small = small_rounds(&inside, relay, &plain, origin.port, SMALL_ROUNDS)?;
    let log_dir = work.path().join("artifacts");
    std::fs::create_dir(&log_dir)?;
    // The runtimes inherit the descriptors as the controller's would (this process spawns
    // nothing else meanwhile).
    let numbers: Vec<i32> = passed.files.iter().map(|fd| fd.as_raw_fd()).collect();
    for fd in &numbers {
        // SAFETY: F_SETFD on a descriptor `passed` keeps open; it touches no memory.
        if unsafe { libc::fcntl(*fd, libc::F_SETFD, 0) } != 0 {
            return Err(std::io::Error::last_os_error()).context("an inheritable namespace");
        }
    }
    let netns = (passed.announce)(&numbers).1.to_string_lossy().into_owned();
    let (mut without, mut joined) = (Vec::new(), Vec::new());
    for _ in 0..START_ROUNDS {
        without.push(empty_batch(&runtime_path, &log_dir, None)?);
        joined.push(empty_batch(&runtime_path, &log_dir, Some(&netns))?);
    }
    network.end();
    proxy.shutdown();
    drop(inside);
    drop(shaped);

    let mib_s = |d: Duration| (BIG_BYTES as f64 / (1 << 20) as f64) / d.as_secs_f64();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let (without, joined) = (median(&mut without), median(&mut joined));
    println!("egress_proxy: through the session's proxy vs direct, same run");
    println!(
        "  1 GiB, one connection : proxy {:>8.1} MiB/s, direct {:>8.1} MiB/s, {:.2}x (goal >= {GOAL_BIG}x)",
        mib_s(big.proxied),
        mib_s(big.direct),
        mib_s(big.proxied) / mib_s(big.direct)
    );
    println!(
        "  CPU per GiB, loopback : proxy {:>8.3} s, direct {:>8.3} s, {:.2}x (user + system of this process: origin, client and, proxied, the proxy)",
        big.proxied_cpu.as_secs_f64(),
        big.direct_cpu.as_secs_f64(),
        big.proxied_cpu.as_secs_f64() / big.direct_cpu.as_secs_f64()
    );
    match &big_shaped {
        Ok(shaped) => {
            println!(
                "  1 GiB, {SHAPED_RATE} link    : proxy {:>8.1} MiB/s, direct {:>8.1} MiB/s, {:.2}x (goal >= {GOAL_BIG}x)",
                mib_s(shaped.proxied),
                mib_s(shaped.direct),
                mib_s(shaped.proxied) / mib_s(shaped.direct)
            );
            println!(
                "  CPU per GiB, link     : proxy {:>8.3} s, direct {:>8.3} s",
                shaped.proxied_cpu.as_secs_f64(),
                shaped.direct_cpu.as_secs_f64()
            );
        }
        Err(why) => println!("  1 GiB, shaped link  : unavailable: {why}"),
    }
    print_small(&small);
    println!(
        "  runtime start        : joined {:>8.3} ms, without {:>8.3} ms, {:.2}x (goal <= {GOAL_START}x)",
        ms(joined),
        ms(without),
        joined.as_secs_f64() / without.as_secs_f64()
    );
    let mut figures = vec![
        Figure {
            row: ROWS[0].0,
            measured: ROWS[0].1,
            value: mib_s(big.proxied),
            baseline: "the same transfer over a direct connection",
            baseline_value: mib_s(big.direct),
            unit: "MiB/s",
            better: Better::Higher,
            goal: Some(GOAL_BIG),
            limit: None,
        },
        Figure {
            row: ROWS[2].0,
            measured: ROWS[2].1,
            value: big.proxied_cpu.as_secs_f64(),
            baseline: "the same for the direct connection",
            baseline_value: big.direct_cpu.as_secs_f64(),
            unit: "s",
            better: Better::Lower,
            goal: None,
            limit: None,
        },
        Figure {
            row: ROWS[3].0,
            measured: ROWS[3].1,
            value: ms(small.proxied),
            baseline: "the same requests direct",
            baseline_value: ms(small.direct),
            unit: "ms",
            better: Better::Lower,
            goal: Some(GOAL_SMALL),
            limit: None,
        },
        Figure {
            row: ROWS[4].0,
            measured: ROWS[4].1,
            value: ms(joined),
            baseline: "the same batch without a namespace to join",
            baseline_value: ms(without),
            unit: "ms",
            better: Better::Lower,
            goal: Some(GOAL_START),
            limit: None,
        },
    ];
    match &big_shaped {
        Ok(shaped) => figures.push(Figure {
            row: ROWS[1].0,
            measured: ROWS[1].1,
            value: mib_s(shaped.proxied),
            baseline: "the same transfer from the same origin over a direct connection",
            baseline_value: mib_s(shaped.direct),
            unit: "MiB/s",
            better: Better::Higher,
            goal: Some(GOAL_BIG),
            limit: None,
        }),
        Err(why) => intendant_bench::report::unavailable(ROWS[1].0, ROWS[1].1, why)?,
    }
    for figure in &figures {
        intendant_bench::report::record(figure)?;
    }
    Ok(())
}

/// Where a big transfer goes: the name the proxy is asked for, the address the direct side
/// connects to, and the origin's port.
#[derive(Clone, Copy)]
struct Target {
    name: &'static str,
    addr: Ipv4Addr,
    port: u16,
}

/// The big transfer's figures for one origin: each side's best time, and its mean CPU (this
/// process's user + system time) per transfer of [`BIG_BYTES`] (1 GiB).
struct Big {
    direct: Duration,
    proxied: Duration,
    direct_cpu: Duration,
    proxied_cpu: Duration,
}

/// [`BIG_ROUNDS`] rounds of the big transfer from `target`, the direct side then the proxied.
fn big_rounds(inside: &Inside, relay: u16, target: Target) -> Result<Big> {
    let mut big = Big {
        direct: Duration::MAX,
        proxied: Duration::MAX,
        direct_cpu: Duration::ZERO,
        proxied_cpu: Duration::ZERO,
    };
    for _ in 0..BIG_ROUNDS {
        let cpu = own_cpu();
        big.direct = big.direct.min(big_direct_once(target)?);
        big.direct_cpu += own_cpu().saturating_sub(cpu);
        let cpu = own_cpu();
        big.proxied = big
            .proxied
            .min(inside.run(move || big_proxied_once(relay, target))?);
        big.proxied_cpu += own_cpu().saturating_sub(cpu);
    }
    let rounds = BIG_ROUNDS as u32;
    big.direct_cpu /= rounds;
    big.proxied_cpu /= rounds;
    Ok(big)
}

/// A host of the bench's own behind a shaped link: a network namespace holding `addr`
/// (`10.201.N.2`), reached from the host's namespace over a veth pair (`10.201.N.1` on the
/// host's end) whose both ends send through `tbf` at [`SHAPED_RATE`]. Everything is removed
/// when it drops, including after a step that failed half way.
struct ShapedHost {
    ns: String,
    veth: String,
    addr: Ipv4Addr,
}

impl ShapedHost {
    fn start() -> Result<ShapedHost> {
        Self::remove_stale();
        let pid = std::process::id();
        let net = (pid % 250 + 1) as u8;
        let host = ShapedHost {
            ns: format!("intd-bench-egress-{pid}"),
            veth: format!("ibe{}h", pid % 1_000_000),
            addr: Ipv4Addr::new(10, 201, net, 2),
        };
        let peer = format!("ibe{}p", pid % 1_000_000);
        let ns = host.ns.as_str();
        let (near, far) = (format!("10.201.{net}.1/24"), format!("10.201.{net}.2/24"));
        // A burst of 256 KiB holds the veth's largest (GSO) packets; `latency` bounds the queue.
        let tbf = [
            "root",
            "tbf",
            "rate",
            SHAPED_RATE,
            "burst",
            "256kb",
            "latency",
            "20ms",
        ];
        let steps: Vec<(&str, Vec<&str>)> = vec![
            ("ip", vec!["netns", "add", ns]),
            (
                "ip",
                vec![
                    "link", "add", &host.veth, "type", "veth", "peer", "name", &peer,
                ],
            ),
            ("ip", vec!["link", "set", &peer, "netns", ns]),
            ("ip", vec!["addr", "add", &near, "dev", &host.veth]),
            ("ip", vec!["link", "set", &host.veth, "up"]),
            ("ip", vec!["-n", ns, "addr", "add", &far, "dev", &peer]),
            ("ip", vec!["-n", ns, "link", "set", &peer, "up"]),
            ("ip", vec!["-n", ns, "link", "set", "lo", "up"]),
            (
                "tc",
                [&["qdisc", "add", "dev", &host.veth][..], &tbf].concat(),
            ),
            (
                "tc",
                [&["-n", ns, "qdisc", "add", "dev", &peer][..], &tbf].concat(),
            ),
        ];
        for (program, args) in steps {
            let out = Command::new(program)
                .args(&args)
                .output()
                .with_context(|| format!("cannot run {program}"))?;
            if !out.status.success() {
                bail!(
                    "{program} {}: {}",
                    args.join(" "),
                    String::from_utf8_lossy(&out.stderr).trim()
                );
            }
        }
        Ok(host)
    }

    /// Removes what an earlier bench killed by a signal (no destructor ran) left: a namespace of
    /// this bench's naming whose process is gone, and with it its veth pair.
    fn remove_stale() {
        let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
            return;
        };
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let Some(name) = line.split_whitespace().next() else {
                continue;
            };
            let Some(pid) = name.strip_prefix("intd-bench-egress-") else {
                continue;
            };
            if pid.parse::<u32>().is_ok() && !Path::new("/proc").join(pid).exists() {
                let _ = Command::new("ip").args(["netns", "del", name]).output();
            }
        }
    }

    /// The namespace's file, for `setns`.
    fn ns_path(&self) -> PathBuf {
        Path::new("/run/netns").join(&self.ns)
    }
}

impl Drop for ShapedHost {
    fn drop(&mut self) {
        // Deleting the namespace removes the peer end, and with it the pair; the host's end is
        // deleted too in case the peer never moved in.
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).output();
        let _ = Command::new("ip")
            .args(["link", "del", &self.veth])
            .output();
    }
}

/// The proxy's hooks here: the origin is allowed by name, so nothing is ever asked; records
/// are dropped.
struct Unasked;

impl EgressHooks for Unasked {
    fn ask(
        self: Arc<Self>,
        host: String,
        _port: u16,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = AskOutcome> + Send>> {
        Box::pin(std::future::ready(AskOutcome::Refused(format!(
            "the benchmark asks about nothing ({host})"
        ))))
    }

    fn record(&self, _record: EgressRecord) {}
}

/// An origin server: `GET /big` streams [`BIG_BYTES`] zeros, anything else is [`SMALL_BODY`];
/// one thread per connection, `Connection: close`.
struct Origin {
    port: u16,
}

impl Origin {
    /// Listens on `addr`, in the network namespace at `netns` (its accepting thread joins it
    /// first) or, with `None`, in the host's.
    fn start(netns: Option<&Path>, addr: Ipv4Addr) -> Result<Origin> {
        let ns = netns
            .map(std::fs::File::open)
            .transpose()
            .context("the origin's network namespace")?;
        let (bound_tx, bound) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let listener = (|| {
                if let Some(ns) = ns {
                    // SAFETY: setns with a namespace descriptor this thread holds open; it
                    // changes only this thread's network namespace.
                    if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                TcpListener::bind((addr, 0))
            })();
            let listener = match listener.and_then(|l| Ok((l.local_addr()?.port(), l))) {
                Ok((port, listener)) => {
                    let _ = bound_tx.send(Ok(port));
                    listener
                }
                Err(e) => {
                    let _ = bound_tx.send(Err(e));
                    return;
                }
            };
            for stream in listener.incoming().flatten() {
                std::thread::spawn(move || {
                    let _ = serve(stream);
                });
            }
        });
        let port = bound
            .recv()
            .context("the origin's thread")?
            .with_context(|| format!("the origin's listener on {addr}"))?;
        Ok(Origin { port })
    }
}

fn serve(stream: TcpStream) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut request = String::new();
    reader.read_line(&mut request)?;
    let mut line = String::new();
    while reader.read_line(&mut line)? > 2 {
        line.clear();
    }
    let mut out = stream;
    if request.contains(" /big ") {
        write!(
            out,
            "HTTP/1.1 200 OK\r\nContent-Length: {BIG_BYTES}\r\nConnection: close\r\n\r\n"
        )?;
        let chunk = vec![0u8; 64 * 1024];
        let mut left = BIG_BYTES;
        while left > 0 {
            let n = left.min(chunk.len() as u64) as usize;
            out.write_all(&chunk[..n])?;
            left -= n as u64;
        }
    } else {
        write!(
            out,
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            SMALL_BODY.len()
        )?;
        out.write_all(SMALL_BODY)?;
    }
    out.flush()
}

/// Reads a response head (up to its blank line) byte by byte, so nothing after it is consumed.
fn read_head(stream: &mut TcpStream) -> Result<String> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte)? == 0 {
            bail!("the connection closed inside a response head");
        }
        head.push(byte[0]);
        if head.len() > 16 * 1024 {
            bail!("a response head over 16 KiB");
        }
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    if !head.starts_with("HTTP/1.1 200") && !head.starts_with("HTTP/1.0 200") {
        bail!("not a 200: {}", head.lines().next().unwrap_or_default());
    }
    Ok(head)
}

/// Reads the rest of a response to its end; the bytes read.
fn drain(stream: &mut TcpStream) -> Result<u64> {
    let mut buf = vec![0u8; 256 * 1024];
    let mut total = 0u64;
    loop {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            return Ok(total);
        }
        total += n as u64;
    }
}

/// `GET /big` on `stream`, read to its end; an error unless all [`BIG_BYTES`] came.
fn get_big(stream: &mut TcpStream, target: Target) -> Result<()> {
    let Target { name, port, .. } = target;
    write!(
        stream,
        "GET /big HTTP/1.1\r\nHost: {name}:{port}\r\nConnection: close\r\n\r\n"
    )?;
    read_head(stream)?;
    let got = drain(stream)?;
    if got != BIG_BYTES {
        bail!("{got} bytes of {BIG_BYTES}");
    }
    Ok(())
}

fn big_direct_once(target: Target) -> Result<Duration> {
    let start = Instant::now();
    let mut stream = TcpStream::connect((target.addr, target.port))?;
    get_big(&mut stream, target)?;
    Ok(start.elapsed())
}

fn big_proxied_once(relay: u16, target: Target) -> Result<Duration> {
    let Target { name, port, .. } = target;
    let start = Instant::now();
    let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, relay))?;
    write!(
        stream,
        "CONNECT {name}:{port} HTTP/1.1\r\nHost: {name}:{port}\r\n\r\n"
    )?;
    read_head(&mut stream).context("the proxy's CONNECT answer")?;
    get_big(&mut stream, target)?;
    Ok(start.elapsed())
}

/// [`SMALL_REQUESTS`] requests, each on a connection of its own: to the origin directly
/// (`proxied_origin` `None`, `port` the origin's), or through the proxy at `port` for the
/// origin's port `proxied_origin`.
fn small_round(port: u16, proxied_origin: Option<u16>) -> Result<Duration> {
    let start = Instant::now();
    for _ in 0..SMALL_REQUESTS {
        let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, port))?;
        let target = match proxied_origin {
            Some(origin) => format!("http://{ORIGIN_NAME}:{origin}/small"),
            None => "/small".to_owned(),
        };
        write!(
            stream,
            "GET {target} HTTP/1.1\r\nHost: {ORIGIN_NAME}\r\nConnection: close\r\n\r\n"
        )?;
        read_head(&mut stream)?;
        let body = drain(&mut stream)?;
        if body != SMALL_BODY.len() as u64 {
            bail!("a small response of {body} bytes");
        }
    }
    Ok(start.elapsed())
}

/// The small requests' best times (direct, through the proxy, through the plain relay), and
/// for each path the mean CPU (this process's user + system: client, origin and, but for the
/// direct side, the proxy or relay) and voluntary context switches per round: a measure of the
/// path's work that the machine's load moves far less than its wall time.
struct Small {
    direct: Duration,
    proxied: Duration,
    plain: Duration,
    cost: [Cost; 3],
}

/// CPU and voluntary context switches, summed over rounds.
#[derive(Default, Clone, Copy)]
struct Cost {
    cpu: Duration,
    switches: u64,
}

/// This process's CPU so far and its voluntary context switches (every thread's).
fn cost_now() -> Result<Cost> {
    let usage = rusage(libc::RUSAGE_SELF);
    Ok(Cost {
        cpu: rusage_cpu(&usage),
        switches: u64::try_from(usage.ru_nvcsw).unwrap_or(0),
    })
}

/// Runs `round`, adding what it cost to `total`; its time.
fn costed(total: &mut Cost, round: impl FnOnce() -> Result<Duration>) -> Result<Duration> {
    let before = cost_now()?;
    let took = round()?;
    let after = cost_now()?;
    total.cpu += after.cpu.saturating_sub(before.cpu);
    total.switches += after.switches.saturating_sub(before.switches);
    Ok(took)
}

/// `rounds` rounds of [`SMALL_REQUESTS`] on each path, the three alternating round by round.
fn small_rounds(
    inside: &Inside,
    relay: u16,
    plain: &PlainRelay,
    origin: u16,
    rounds: usize,
) -> Result<Small> {
    let mut small = Small {
        direct: Duration::MAX,
        proxied: Duration::MAX,
        plain: Duration::MAX,
        cost: [Cost::default(); 3],
    };
    let plain = plain.port;
    for _ in 0..rounds {
        let [direct, proxied, relayed] = &mut small.cost;
        let took = costed(direct, || small_round(origin, None))?;
        small.direct = small.direct.min(took);
        let took = costed(proxied, || {
            inside.run(move || small_round(relay, Some(origin)))
        })?;
        small.proxied = small.proxied.min(took);
        let took = costed(relayed, || inside.run(move || small_round(plain, None)))?;
        small.plain = small.plain.min(took);
    }
    for cost in &mut small.cost {
        cost.cpu /= rounds as u32;
        cost.switches /= rounds as u64;
    }
    Ok(small)
}

#[allow(clippy::print_stdout)] // a benchmark binary reports on stdout
fn print_small(small: &Small) {
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let per = |d: Duration| d.as_secs_f64() * 1e6 / SMALL_REQUESTS as f64;
    println!(
        "  {SMALL_REQUESTS} small requests  : proxy {:>8.1} ms, direct {:>8.1} ms, {:.2}x (goal <= {GOAL_SMALL}x); {:.1} us more per request",
        ms(small.proxied),
        ms(small.direct),
        small.proxied.as_secs_f64() / small.direct.as_secs_f64(),
        per(small.proxied) - per(small.direct)
    );
    println!(
        "  the same, plain relay : relay {:>8.1} ms, {:.2}x direct, {:.1} us more per request (the extra hop's floor: no parsing, no policy)",
        ms(small.plain),
        small.plain.as_secs_f64() / small.direct.as_secs_f64(),
        per(small.plain) - per(small.direct)
    );
    let [direct, proxied, plain] = small.cost;
    let switches = |c: Cost| c.switches as f64 / SMALL_REQUESTS as f64;
    println!(
        "  per request, CPU      : direct {:.1} us, proxy {:.1} us, relay {:.1} us; voluntary switches: direct {:.1}, proxy {:.1}, relay {:.1} (mean of rounds, this process)",
        per(direct.cpu),
        per(proxied.cpu),
        per(plain.cpu),
        switches(direct),
        switches(proxied),
        switches(plain)
    );
}

/// The floor of the extra hop: a relay on the proxy's runtime that accepts on the session's
/// loopback (its listener made inside the namespace), connects each connection to the origin
/// and copies bytes both ways (`copy_bidirectional`), with no parsing and no policy. The
/// requests sent to it are the direct side's (origin form). It stops when the runtime does.
struct PlainRelay {
    port: u16,
}

impl PlainRelay {
    fn start(inside: &Inside, runtime: &tokio::runtime::Handle, origin: u16) -> Result<PlainRelay> {
        let listener = inside.run(|| Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?))?;
        let port = listener.local_addr()?.port();
        listener.set_nonblocking(true)?;
        let listener = {
            let _entered = runtime.enter();
            tokio::net::TcpListener::from_std(listener)?
        };
        runtime.spawn(async move {
            loop {
                let Ok((mut client, _)) = listener.accept().await else {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                };
                tokio::spawn(async move {
                    let _ = client.set_nodelay(true);
                    let Ok(mut upstream) =
                        tokio::net::TcpStream::connect((Ipv4Addr::LOCALHOST, origin)).await
                    else {
                        return;
                    };
                    let _ = upstream.set_nodelay(true);
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                });
            }
        });
        Ok(PlainRelay { port })
    }
}

/// A thread joined to the session's network namespace, running what it is handed.
struct Inside {
    jobs: std::sync::mpsc::Sender<Job>,
    thread: Option<std::thread::JoinHandle<()>>,
}

type Job = Box<dyn FnOnce() + Send>;

impl Inside {
    fn join(net: &std::os::fd::OwnedFd) -> Result<Inside> {
        let ns = net.try_clone().context("the session's network namespace")?;
        let (jobs, rx) = std::sync::mpsc::channel::<Job>();
        let (joined_tx, joined) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            // SAFETY: setns with a namespace descriptor this thread holds open; it changes
            // only this thread's network namespace.
            let rc = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
            let _ = joined_tx.send(if rc == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            });
            if rc == 0 {
                for job in rx {
                    job();
                }
            }
        });
        joined
            .recv()
            .context("the namespace thread")?
            .context("setns into the session's namespace")?;
        Ok(Inside {
            jobs,
            thread: Some(thread),
        })
    }

    fn run<T: Send + 'static>(&self, f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
        let (tx, rx) = std::sync::mpsc::channel();
        self.jobs
            .send(Box::new(move || {
                let _ = tx.send(f());
            }))
            .map_err(|_| anyhow::anyhow!("the namespace thread ended"))?;
        rx.recv().context("the namespace thread ended")?
    }
}

impl Drop for Inside {
    fn drop(&mut self) {
        let (closed, _) = std::sync::mpsc::channel();
        drop(std::mem::replace(&mut self.jobs, closed));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn median(samples: &mut [Duration]) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn empty_batch(runtime: &Path, log_dir: &Path, netns: Option<&str>) -> Result<Duration> {
    let env: Vec<(&str, &str)> = netns.map(|t| (SESSION_NETNS_ENV, t)).into_iter().collect();
    let (elapsed, _) =
        intendant_bench::run_batch_with(runtime, br#"{"commands":[]}"#, log_dir, true, &env)?;
    Ok(elapsed)
}
