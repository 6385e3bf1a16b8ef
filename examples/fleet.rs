//! A fleet end to end: three router instances, a real Prometheus scraping
//! them, and the fleet rules of `ops/fleet.yml` picking the culprit.
//!
//! ```text
//! cargo run --features prometheus --example fleet -- --scenario downstream --prometheus /usr/bin/prometheus
//! cargo run --features prometheus --example fleet -- --scenario router --prometheus /usr/bin/prometheus
//! ```
//!
//! One process holds three [`Registry`]s, the router instances `a`, `b` and
//! `c`, each serving its own `/metrics` on a free 127.0.0.1 port. Each has
//! the consumers `pricing`, `search`, `ledger` and `profile`, called at 400
//! (a), 250 (b) and 150 (c) calls/s per consumer with synthetic latencies
//! (lognormal, a median of 5 to 15 ms per consumer, seeded), on breakers
//! with a 50 ms threshold, 200 ms windows and a 0.5 to 2 s backoff, on the
//! real clock and the process ticker. From 6 s to 18 s into the traffic:
//!
//! - `downstream`: 30% of `pricing`'s calls take 120 to 200 ms, on every
//!   instance;
//! - `router`: every call on instance `c` takes 80 ms more.
//!
//! The example starts Prometheus itself (`--prometheus PATH`, default
//! `prometheus` on the `PATH`) on a free loopback port, in a temporary
//! directory, scraping the three instances every second and evaluating
//! `ops/alerts.yml` and `ops/fleet.yml` (or the files given with
//! `--rules`) every second. It then checks, through Prometheus's HTTP API:
//!
//! 1. before the slowdown, no alert of the fleet rules is pending or firing;
//! 2. during it, the right alert is pending (or firing) for the right label
//!    (`TailguardConsumerDegradedFleetWide{consumer="pricing"}`, or
//!    `TailguardRouterInstanceDegraded{instance="c"}`) and the other one for
//!    nobody; the two ratio recording rules are printed and checked;
//! 3. once the traffic stopped and every breaker closed again: the fleet P99
//!    per consumer from the cumulative `breaker_call_duration_seconds`
//!    buckets lies in the histogram bucket of the exact P99 of every
//!    latency recorded (an adjacent bucket only when the exact P99 is within
//!    1% of an edge);
//! 4. `breaker_open_seconds_total` per instance and consumer agrees, within
//!    0.1 s + 5%, with the time a monitor thread polling each breaker's
//!    `state()` every millisecond saw it OPEN.
//!
//! It exits with status 1 and a message on the first failed check, and
//! stops Prometheus and removes its directory however it ends (but on
//! `SIGKILL`: `.ci/fleet-e2e.sh` runs it under `timeout`, which also kills
//! Prometheus). Each run takes about 35 s. Loopback addresses only.

#[path = "common/metrics_http.rs"]
mod metrics_http;

use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tailguard::{Breaker, Registry, State};

const USAGE: &str = "usage: fleet --scenario downstream|router [--prometheus PATH] [--rules FILE]... \
                     [--work-dir DIR] [--seed N]";

/// The router instances: name and calls per second to each consumer.
const INSTANCES: [(&str, f64); 3] = [("a", 400.0), ("b", 250.0), ("c", 150.0)];
/// The consumers: name and median latency (ms) when healthy.
const CONSUMERS: [(&str, f64); 4] = [("pricing", 8.0), ("search", 12.0), ("ledger", 5.0), ("profile", 15.0)];
/// The consumer the `downstream` scenario slows, and the instance the `router` one slows.
const SLOW_CONSUMER: usize = 0;
const SLOW_INSTANCE: usize = 2;

/// The timeline, from the start of the traffic.
const SLOW_FROM: Duration = Duration::from_secs(6);
const SLOW_UNTIL: Duration = Duration::from_secs(18);
const TRAFFIC_STOPS: Duration = Duration::from_secs(25);
/// The negative check (no fleet alert yet) is made at this time.
const NEGATIVE_CHECK_AT: Duration = Duration::from_secs(5);

const THRESHOLD: Duration = Duration::from_millis(50);
const WINDOW: Duration = Duration::from_millis(200);

const ALERT_DOWNSTREAM: &str = "TailguardConsumerDegradedFleetWide";
const ALERT_ROUTER: &str = "TailguardRouterInstanceDegraded";

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Scenario {
    /// One consumer slow on every instance.
    Downstream,
    /// Every consumer slow on one instance.
    Router,
}

impl Scenario {
    fn name(self) -> &'static str {
        match self {
            Scenario::Downstream => "downstream",
            Scenario::Router => "router",
        }
    }
}

struct Args {
    scenario: Scenario,
    prometheus: PathBuf,
    rules: Vec<PathBuf>,
    work_dir: Option<PathBuf>,
    seed: u64,
}

fn parse_args() -> Result<Args, String> {
    let mut scenario = None;
    let mut prometheus = PathBuf::from("prometheus");
    let mut rules = Vec::new();
    let mut work_dir = None;
    let mut seed = 1;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |flag: &str| args.next().ok_or(format!("{flag} needs a value"));
        match arg.as_str() {
            "-h" | "--help" => return Err(String::new()),
            "--scenario" => {
                scenario = Some(match value("--scenario")?.as_str() {
                    "downstream" => Scenario::Downstream,
                    "router" => Scenario::Router,
                    other => return Err(format!("--scenario: downstream or router, not {other}")),
                })
            }
            "--prometheus" => prometheus = PathBuf::from(value("--prometheus")?),
            "--rules" => rules.push(PathBuf::from(value("--rules")?)),
            "--work-dir" => work_dir = Some(PathBuf::from(value("--work-dir")?)),
            "--seed" => {
                let v = value("--seed")?;
                seed = v.parse().map_err(|_| format!("--seed: not a number: {v}"))?;
            }
            other => return Err(format!("unexpected argument: {other}")),
        }
    }
    let scenario = scenario.ok_or("--scenario is required")?;
    if rules.is_empty() {
        let ops = Path::new(env!("CARGO_MANIFEST_DIR")).join("ops");
        rules = vec![ops.join("alerts.yml"), ops.join("fleet.yml")];
    }
    let mut absolute = Vec::new();
    for r in rules {
        absolute.push(std::fs::canonicalize(&r).map_err(|e| format!("rule file {}: {e}", r.display()))?);
    }
    Ok(Args {
        scenario,
        prometheus,
        rules: absolute,
        work_dir,
        seed,
    })
}

// ---------------------------------------------------------------------------
// Synthetic latencies

/// splitmix64: small, seeded, good enough for synthetic latencies.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Standard normal (Box-Muller).
    fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.unit(); // (0, 1]
        let u2 = self.unit();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
}

/// A healthy call of a consumer with this median: lognormal (σ = 0.35),
/// redrawn above 45 ms so that a healthy consumer has no slow calls at all.
fn healthy_latency(rng: &mut Rng, median_ms: f64) -> Duration {
    loop {
        let ms = median_ms * (0.35 * rng.normal()).exp();
        if ms <= 45.0 {
            return Duration::from_secs_f64(ms / 1e3);
        }
    }
}

/// The latency of one call of `consumer` on `instance`, `t` into the traffic.
fn latency(rng: &mut Rng, scenario: Scenario, instance: usize, consumer: usize, t: Duration) -> Duration {
    let base = healthy_latency(rng, CONSUMERS[consumer].1);
    if !(SLOW_FROM..SLOW_UNTIL).contains(&t) {
        return base;
    }
    match scenario {
        Scenario::Downstream if consumer == SLOW_CONSUMER && rng.unit() < 0.3 => {
            Duration::from_secs_f64((120.0 + 80.0 * rng.unit()) / 1e3)
        }
        Scenario::Router if instance == SLOW_INSTANCE => base + Duration::from_millis(80),
        _ => base,
    }
}

/// Calls every consumer of one instance at its rate until `TRAFFIC_STOPS`;
/// returns every latency recorded through a permit, per consumer, in
/// nanoseconds (rejected calls are not calls).
fn traffic(instance: usize, breakers: Vec<Breaker>, scenario: Scenario, start: Instant, seed: u64) -> Vec<Vec<u64>> {
    let mut rng = Rng(seed ^ (0x1000 * (instance as u64 + 1)));
    let rate = INSTANCES[instance].1;
    let mut truth = vec![Vec::new(); breakers.len()];
    for n in 0u64.. {
        let due = Duration::from_secs_f64(n as f64 / rate);
        if due >= TRAFFIC_STOPS {
            break;
        }
        let now = start.elapsed();
        if due > now {
            std::thread::sleep(due - now);
        }
        let t = start.elapsed();
        for (consumer, breaker) in breakers.iter().enumerate() {
            if let Ok(permit) = breaker.allow() {
                let d = latency(&mut rng, scenario, instance, consumer, t);
                permit.record_latency(d, true);
                truth[consumer].push(d.as_nanos() as u64);
            }
        }
    }
    truth
}

/// Polls every breaker's `state()` about every millisecond until `stop`,
/// and integrates the time each was seen OPEN.
fn monitor(breakers: Vec<Breaker>, stop: Arc<AtomicBool>) -> Vec<Duration> {
    let mut open = vec![Duration::ZERO; breakers.len()];
    let mut last: Vec<(Instant, State)> = breakers.iter().map(|b| (Instant::now(), b.state())).collect();
    while !stop.load(Ordering::Relaxed) {
        for (i, b) in breakers.iter().enumerate() {
            let now = Instant::now();
            if last[i].1 == State::Open {
                open[i] += now - last[i].0;
            }
            last[i] = (now, b.state());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let now = Instant::now();
    for (i, (at, state)) in last.into_iter().enumerate() {
        if state == State::Open {
            open[i] += now - at;
        }
    }
    open
}

// ---------------------------------------------------------------------------
// The instances' /metrics

/// Serves `registry` on `listener` until `stop`.
fn serve(listener: TcpListener, registry: Registry, stop: Arc<AtomicBool>) -> std::io::Result<JoinHandle<()>> {
    listener.set_nonblocking(true)?;
    std::thread::Builder::new().name("metrics".into()).spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            match listener.accept() {
                Ok((stream, _)) => {
                    if let Err(e) = stream
                        .set_nonblocking(false)
                        .and_then(|()| metrics_http::respond(stream, &registry))
                    {
                        eprintln!("fleet: /metrics: {e}");
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(5)),
                Err(e) => eprintln!("fleet: accept: {e}"),
            }
        }
    })
}

// ---------------------------------------------------------------------------
// Prometheus: the process, and its HTTP API

/// A directory removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(parent: Option<&Path>) -> Result<Self, String> {
        let parent = parent.map_or_else(std::env::temp_dir, Path::to_path_buf);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir = parent.join(format!("tailguard-fleet-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        Ok(Self(dir))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A Prometheus server on 127.0.0.1, killed when dropped.
struct Prometheus {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One sample of an instant vector.
struct Sample {
    labels: BTreeMap<String, String>,
    value: f64,
}

impl Sample {
    fn label(&self, name: &str) -> &str {
        self.labels.get(name).map_or("", String::as_str)
    }
}

/// One active alert.
struct Alert {
    name: String,
    labels: BTreeMap<String, String>,
    state: String,
}

impl Alert {
    fn label(&self, name: &str) -> &str {
        self.labels.get(name).map_or("", String::as_str)
    }
}

fn free_port() -> Result<u16, String> {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(|e| format!("binding a free port: {e}"))?;
    l.local_addr().map(|a| a.port()).map_err(|e| e.to_string())
}

fn url_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// `GET path` on 127.0.0.1:port with HTTP/1.0: the status and the body.
fn http_get(port: u16, path: &str) -> Result<(u16, String), String> {
    let err = |e: std::io::Error| format!("GET 127.0.0.1:{port}{path}: {e}");
    let mut stream =
        TcpStream::connect_timeout(&(Ipv4Addr::LOCALHOST, port).into(), Duration::from_secs(2)).map_err(err)?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).map_err(err)?;
    stream.set_write_timeout(Some(Duration::from_secs(5))).map_err(err)?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n").map_err(err)?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).map_err(err)?;
    let response = String::from_utf8_lossy(&response);
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("GET {path}: no end of headers in the response"))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("GET {path}: no status in {:?}", head.lines().next()))?;
    Ok((status, body.to_string()))
}

impl Prometheus {
    /// Starts `binary` in `dir`, scraping `targets` (instance name, port).
    fn start(binary: &Path, dir: &Path, rules: &[PathBuf], targets: &[(&str, u16)]) -> Result<Self, String> {
        let mut config = String::from(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\nrule_files:\n",
        );
        for r in rules {
            let _ = writeln!(config, "  - '{}'", r.display());
        }
        config.push_str("scrape_configs:\n  - job_name: tailguard\n    static_configs:\n");
        for (name, port) in targets {
            let _ = writeln!(
                config,
                "      - targets: ['127.0.0.1:{port}']\n        labels: {{instance: '{name}'}}"
            );
        }
        let config_path = dir.join("prometheus.yml");
        std::fs::write(&config_path, config).map_err(|e| format!("writing {}: {e}", config_path.display()))?;
        let port = free_port()?;
        let log = dir.join("prometheus.log");
        let log_file = std::fs::File::create(&log).map_err(|e| format!("creating {}: {e}", log.display()))?;
        let log_err = log_file.try_clone().map_err(|e| e.to_string())?;
        let child = Command::new(binary)
            .arg(format!("--config.file={}", config_path.display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("tsdb").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(log_file)
            .stderr(log_err)
            .spawn()
            .map_err(|e| format!("starting {}: {e}", binary.display()))?;
        let mut prometheus = Prometheus { child, port, log };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(Some(status)) = prometheus.child.try_wait() {
                return Err(format!("prometheus exited ({status}):\n{}", prometheus.log_tail()));
            }
            if matches!(http_get(port, "/-/ready"), Ok((200, _))) {
                return Ok(prometheus);
            }
            if Instant::now() > deadline {
                return Err(format!("prometheus not ready within 20 s:\n{}", prometheus.log_tail()));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// `GET /api/v1/...`: the `data` of a successful answer.
    fn api(&self, path: &str) -> Result<Value, String> {
        let (status, body) = http_get(self.port, path)?;
        let json: Value = serde_json::from_str(&body).map_err(|e| format!("GET {path}: {e}: {body}"))?;
        if status != 200 || json["status"] != "success" {
            return Err(format!("GET {path}: HTTP {status}: {body}"));
        }
        Ok(json["data"].clone())
    }

    /// An instant query, answered as a vector.
    fn query(&self, promql: &str) -> Result<Vec<Sample>, String> {
        let data = self.api(&format!("/api/v1/query?query={}", url_encode(promql)))?;
        let result = data["result"]
            .as_array()
            .ok_or_else(|| format!("{promql}: not a vector: {data}"))?;
        let mut samples = Vec::new();
        for r in result {
            let labels = labels(&r["metric"]);
            let value = r["value"][1]
                .as_str()
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| format!("{promql}: no value in {r}"))?;
            samples.push(Sample { labels, value });
        }
        Ok(samples)
    }

    /// Every pending or firing alert.
    fn alerts(&self) -> Result<Vec<Alert>, String> {
        let data = self.api("/api/v1/alerts")?;
        let list = data["alerts"].as_array().ok_or_else(|| format!("alerts: {data}"))?;
        Ok(list
            .iter()
            .map(|a| {
                let labels = labels(&a["labels"]);
                Alert {
                    name: labels.get("alertname").cloned().unwrap_or_default(),
                    labels,
                    state: a["state"].as_str().unwrap_or("").to_string(),
                }
            })
            .collect())
    }

    /// The names of the alerting rules loaded from a file named `file_name`.
    fn alert_rules_of(&self, file_name: &str) -> Result<Vec<String>, String> {
        let data = self.api("/api/v1/rules?type=alert")?;
        let mut names = Vec::new();
        for group in data["groups"].as_array().into_iter().flatten() {
            if !group["file"].as_str().is_some_and(|f| f.ends_with(file_name)) {
                continue;
            }
            for rule in group["rules"].as_array().into_iter().flatten() {
                if let Some(name) = rule["name"].as_str() {
                    names.push(name.to_string());
                }
            }
        }
        Ok(names)
    }
}

fn labels(v: &Value) -> BTreeMap<String, String> {
    v.as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
        .collect()
}

fn describe(alert: &Alert) -> String {
    let labels: Vec<String> = alert
        .labels
        .iter()
        .filter(|(k, _)| *k != "alertname")
        .map(|(k, v)| format!("{k}=\"{v}\""))
        .collect();
    format!("{}{{{}}} {}", alert.name, labels.join(","), alert.state)
}

fn sleep_until(start: Instant, t: Duration) {
    if let Some(left) = t.checked_sub(start.elapsed()) {
        std::thread::sleep(left);
    }
}

// ---------------------------------------------------------------------------
// The run

/// A failed check.
fn fail(msg: String) -> Result<(), String> {
    Err(msg)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(msg) => {
            if !msg.is_empty() {
                eprintln!("fleet: {msg}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(if msg.is_empty() { 0 } else { 2 });
        }
    };
    let began = Instant::now();
    match run(&args) {
        Ok(()) => {
            println!(
                "fleet {}: every check passed in {:.1} s",
                args.scenario.name(),
                began.elapsed().as_secs_f64()
            );
            ExitCode::SUCCESS
        }
        Err(msg) => {
            eprintln!("fleet {}: FAILED: {msg}", args.scenario.name());
            ExitCode::FAILURE
        }
    }
}

fn build_breaker() -> tailguard::BreakerBuilder {
    Breaker::builder()
        .latency_threshold(THRESHOLD)
        .window(WINDOW)
        .base_backoff(Duration::from_millis(500))
        .max_backoff(Duration::from_secs(2))
}

fn run(args: &Args) -> Result<(), String> {
    let scenario = args.scenario;
    println!("fleet {}: seed {}", scenario.name(), args.seed);
    let work = TempDir::new(args.work_dir.as_deref())?;

    // The instances, their breakers (instance-major) and their /metrics.
    let stop_servers = Arc::new(AtomicBool::new(false));
    let mut breakers: Vec<Vec<Breaker>> = Vec::new();
    let mut targets = Vec::new();
    let mut servers = Vec::new();
    for (name, rate) in INSTANCES {
        let registry = Registry::new();
        let mut own = Vec::new();
        for (consumer, _) in CONSUMERS {
            own.push(
                registry
                    .get_or_create(consumer, build_breaker)
                    .map_err(|e| format!("building {consumer}: {e}"))?,
            );
        }
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(|e| format!("binding {name}: {e}"))?;
        let port = listener.local_addr().map_err(|e| e.to_string())?.port();
        println!("instance {name}: {rate} calls/s per consumer, http://127.0.0.1:{port}/metrics");
        servers.push(serve(listener, registry.clone(), Arc::clone(&stop_servers)).map_err(|e| e.to_string())?);
        targets.push((name, port));
        breakers.push(own);
    }
    let result = with_prometheus(args, &work, &targets, &breakers);
    stop_servers.store(true, Ordering::Relaxed);
    for s in servers {
        let _ = s.join();
    }
    result
}

fn with_prometheus(
    args: &Args,
    work: &TempDir,
    targets: &[(&str, u16)],
    breakers: &[Vec<Breaker>],
) -> Result<(), String> {
    let scenario = args.scenario;
    let prom = Prometheus::start(&args.prometheus, &work.0, &args.rules, targets)?;
    println!(
        "prometheus on http://127.0.0.1:{}/ (rules: {:?})",
        prom.port, args.rules
    );
    let fleet_alerts = prom.alert_rules_of("fleet.yml")?;
    for needed in [ALERT_DOWNSTREAM, ALERT_ROUTER] {
        if !fleet_alerts.iter().any(|a| a == needed) {
            return fail(format!(
                "alert {needed} not loaded from fleet.yml (loaded: {fleet_alerts:?})"
            ));
        }
    }
    println!("fleet alerting rules loaded: {fleet_alerts:?}");

    // Every target up before the traffic starts.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let up = prom.query("up == 1")?;
        if up.len() == targets.len() {
            break;
        }
        if Instant::now() > deadline {
            return fail(format!("{} of {} targets up within 15 s", up.len(), targets.len()));
        }
        std::thread::sleep(Duration::from_millis(250));
    }

    let start = Instant::now();
    let stop_monitor = Arc::new(AtomicBool::new(false));
    let monitor_thread = {
        let all: Vec<Breaker> = breakers.iter().flatten().cloned().collect();
        let stop = Arc::clone(&stop_monitor);
        std::thread::Builder::new()
            .name("monitor".into())
            .spawn(move || monitor(all, stop))
            .map_err(|e| e.to_string())?
    };
    let mut traffic_threads = Vec::new();
    for (i, own) in breakers.iter().enumerate() {
        let own = own.clone();
        let seed = args.seed;
        traffic_threads.push(
            std::thread::Builder::new()
                .name(format!("traffic-{}", INSTANCES[i].0))
                .spawn(move || traffic(i, own, scenario, start, seed))
                .map_err(|e| e.to_string())?,
        );
    }
    println!(
        "traffic started; slowdown ({}) from {:?} to {:?}; traffic stops at {:?}",
        match scenario {
            Scenario::Downstream => format!(
                "30% of {}'s calls at 120-200 ms on every instance",
                CONSUMERS[SLOW_CONSUMER].0
            ),
            Scenario::Router => format!("+80 ms on every call of instance {}", INSTANCES[SLOW_INSTANCE].0),
        },
        SLOW_FROM,
        SLOW_UNTIL,
        TRAFFIC_STOPS
    );

    check_quiet(&prom, &fleet_alerts, start)?;
    watch_slowdown(&prom, scenario, &fleet_alerts, start)?;

    // The traffic stops; the last window closes; every breaker is closed.
    let mut truth: Vec<Vec<Vec<u64>>> = Vec::new();
    for t in traffic_threads {
        truth.push(t.join().map_err(|_| "a traffic thread panicked".to_string())?);
    }
    std::thread::sleep(WINDOW + WINDOW / 2);
    stop_monitor.store(true, Ordering::Relaxed);
    let open_truth = monitor_thread
        .join()
        .map_err(|_| "the monitor thread panicked".to_string())?;
    for (i, own) in breakers.iter().enumerate() {
        for (c, b) in own.iter().enumerate() {
            if b.state() != State::Closed {
                return fail(format!(
                    "{}/{} is {:?} at the end, not closed again",
                    INSTANCES[i].0,
                    CONSUMERS[c].0,
                    b.state()
                ));
            }
        }
    }
    wait_for_scrapes_after(&prom, SystemTime::now())?;
    println!(
        "t={:.1}s: traffic stopped, every breaker closed, scraped twice since",
        start.elapsed().as_secs_f64()
    );

    check_p99(&prom, breakers, &truth)?;
    check_open_seconds(&prom, breakers, &open_truth)?;
    println!(
        "run took {:.1} s from the start of the traffic",
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

/// (b), the negative case: just before the slowdown, the rules see every
/// breaker healthy and no fleet alert is pending or firing.
fn check_quiet(prom: &Prometheus, fleet_alerts: &[String], start: Instant) -> Result<(), String> {
    sleep_until(start, NEGATIVE_CHECK_AT);
    let unhealthy = prom.query("tailguard:consumer_unhealthy")?;
    let expected_series = INSTANCES.len() * CONSUMERS.len();
    if unhealthy.len() != expected_series {
        return fail(format!(
            "before the slowdown: {} series of tailguard:consumer_unhealthy, not {expected_series} (the rules see no data)",
            unhealthy.len()
        ));
    }
    if let Some(s) = unhealthy.iter().find(|s| s.value != 0.0) {
        return fail(format!(
            "before the slowdown: tailguard:consumer_unhealthy{{consumer=\"{}\",instance=\"{}\"}} = {}",
            s.label("consumer"),
            s.label("instance"),
            s.value
        ));
    }
    let early: Vec<Alert> = prom
        .alerts()?
        .into_iter()
        .filter(|a| fleet_alerts.contains(&a.name))
        .collect();
    if !early.is_empty() {
        let list: Vec<String> = early.iter().map(describe).collect();
        return fail(format!("before the slowdown, fleet alerts active: {list:?}"));
    }
    println!(
        "t={:.1}s (before the slowdown): {expected_series} consumer_unhealthy series, all 0; no fleet alert pending or firing: ok",
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

/// (b): from the slowdown until the traffic stops, the expected alert goes
/// pending (or firing) for the culprit, and no fleet alert for anyone else.
fn watch_slowdown(
    prom: &Prometheus,
    scenario: Scenario,
    fleet_alerts: &[String],
    start: Instant,
) -> Result<(), String> {
    let (expected_alert, label, culprit, wrong_alert) = match scenario {
        Scenario::Downstream => (ALERT_DOWNSTREAM, "consumer", CONSUMERS[SLOW_CONSUMER].0, ALERT_ROUTER),
        Scenario::Router => (ALERT_ROUTER, "instance", INSTANCES[SLOW_INSTANCE].0, ALERT_DOWNSTREAM),
    };
    let mut first_seen: Option<Duration> = None;
    // Each wrong alert once, with the time it was first seen.
    let mut wrong: Vec<String> = Vec::new();
    let mut others_seen: BTreeMap<String, Duration> = BTreeMap::new();
    let mut ratios_printed = false;
    while start.elapsed() < TRAFFIC_STOPS - Duration::from_millis(500) {
        let t = start.elapsed();
        for alert in prom.alerts()? {
            if !(alert.state == "pending" || alert.state == "firing") || !fleet_alerts.contains(&alert.name) {
                continue;
            }
            if alert.name == expected_alert && alert.label(label) == culprit {
                if first_seen.is_none() {
                    first_seen = Some(t);
                    println!("t={:.1}s: {} (expected)", t.as_secs_f64(), describe(&alert));
                }
            } else if alert.name == expected_alert || alert.name == wrong_alert {
                let what = describe(&alert);
                if !wrong.iter().any(|w| w.ends_with(&what)) {
                    wrong.push(format!("t={:.1}s: {what}", t.as_secs_f64()));
                }
            } else {
                others_seen.entry(describe(&alert)).or_insert(t);
            }
        }
        // The ratios, once the expected alert is pending and the slowdown well in.
        if !ratios_printed && first_seen.is_some() && t >= SLOW_FROM + Duration::from_secs(6) {
            ratios_printed = true;
            check_ratios(prom, scenario, t)?;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let mut others_seen: Vec<(String, Duration)> = others_seen.into_iter().collect();
    others_seen.sort_by_key(|(_, t)| *t);
    for (alert, t) in &others_seen {
        println!("t={:.1}s: also active: {alert} (not checked)", t.as_secs_f64());
    }
    if !wrong.is_empty() {
        return fail(format!("wrong culprit: {wrong:?}"));
    }
    let Some(seen) = first_seen else {
        return fail(format!(
            "{expected_alert}{{{label}=\"{culprit}\"}} never pending or firing during the slowdown"
        ));
    };
    if !ratios_printed {
        return fail("the ratio recording rules were never read during the slowdown".to_string());
    }
    println!(
        "{expected_alert}{{{label}=\"{culprit}\"}} pending {:.1} s after the slowdown began; no {wrong_alert}, no {expected_alert} for anyone else: ok",
        seen.saturating_sub(SLOW_FROM).as_secs_f64()
    );
    Ok(())
}

/// Waits (up to 10 s) until Prometheus has scraped every instance twice after `since`.
fn wait_for_scrapes_after(prom: &Prometheus, since: SystemTime) -> Result<(), String> {
    let since = since
        .duration_since(UNIX_EPOCH)
        .map_err(|e| e.to_string())?
        .as_secs_f64();
    let expected_series = INSTANCES.len() * CONSUMERS.len();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        // Two scrapes at 1 s intervals: the last one more than 1 s after `since`.
        let stamps = prom.query("timestamp(breaker_calls_total)")?;
        if stamps.len() == expected_series && stamps.iter().all(|s| s.value > since + 1.0) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return fail("no two scrapes of every instance within 10 s of the end of the traffic".to_string());
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// (b): the two ratio recording rules, printed and checked against the scenario.
fn check_ratios(prom: &Prometheus, scenario: Scenario, t: Duration) -> Result<(), String> {
    let by_consumer = prom.query("tailguard:consumer_unhealthy_instances:ratio")?;
    let by_instance = prom.query("tailguard:instance_unhealthy_consumers:ratio")?;
    println!(
        "t={:.1}s: tailguard:consumer_unhealthy_instances:ratio",
        t.as_secs_f64()
    );
    for s in &by_consumer {
        println!("    consumer={:<8} {:.3}", s.label("consumer"), s.value);
    }
    println!(
        "t={:.1}s: tailguard:instance_unhealthy_consumers:ratio",
        t.as_secs_f64()
    );
    for s in &by_instance {
        println!("    instance={:<8} {:.3}", s.label("instance"), s.value);
    }
    if by_consumer.len() != CONSUMERS.len() {
        return fail(format!(
            "{} series of tailguard:consumer_unhealthy_instances:ratio, not {}",
            by_consumer.len(),
            CONSUMERS.len()
        ));
    }
    let mut problems = Vec::new();
    for s in &by_consumer {
        let slow = scenario == Scenario::Downstream && s.label("consumer") == CONSUMERS[SLOW_CONSUMER].0;
        let ok = match (scenario, slow) {
            // The slowed consumer: unhealthy on more than half the fleet (all of it).
            (_, true) => s.value > 0.5,
            (Scenario::Downstream, false) => s.value == 0.0,
            // One instance of three.
            (Scenario::Router, false) => s.value <= 0.5,
        };
        if !ok {
            problems.push(format!("consumer {}: {}", s.label("consumer"), s.value));
        }
    }
    for s in &by_instance {
        let slow = scenario == Scenario::Router && s.label("instance") == INSTANCES[SLOW_INSTANCE].0;
        // NaN would mean no consumer left to count (all unhealthy fleet-wide): not a degraded instance.
        let ok = if slow {
            s.value >= 0.5
        } else {
            s.value.is_nan() || s.value < 0.5
        };
        if !ok {
            problems.push(format!("instance {}: {}", s.label("instance"), s.value));
        }
    }
    if scenario == Scenario::Router
        && !by_instance
            .iter()
            .any(|s| s.label("instance") == INSTANCES[SLOW_INSTANCE].0)
    {
        problems.push(format!("no ratio for instance {}", INSTANCES[SLOW_INSTANCE].0));
    }
    if problems.is_empty() {
        println!("    ratios as the scenario says: ok");
        Ok(())
    } else {
        fail(format!("ratios against the {} scenario: {problems:?}", scenario.name()))
    }
}

/// (a): the fleet P99 per consumer from the cumulative buckets, against the
/// exact P99 of every latency the three instances recorded.
fn check_p99(prom: &Prometheus, breakers: &[Vec<Breaker>], truth: &[Vec<Vec<u64>>]) -> Result<(), String> {
    let estimates =
        prom.query("histogram_quantile(0.99, sum by (le, consumer) (breaker_call_duration_seconds_bucket))")?;
    let buckets = prom.query("sum by (le, consumer) (breaker_call_duration_seconds_bucket)")?;
    let counts = prom.query("sum by (consumer) (breaker_call_duration_seconds_count)")?;
    println!("fleet P99 per consumer (every call since start), exact vs histogram_quantile:");
    let mut problems = Vec::new();
    for (c, (consumer, _)) in CONSUMERS.iter().enumerate() {
        let mut all: Vec<u64> = truth.iter().flat_map(|inst| inst[c].iter().copied()).collect();
        all.sort_unstable();
        if all.is_empty() {
            problems.push(format!("{consumer}: no calls recorded"));
            continue;
        }
        let rank = (all.len() as f64 * 0.99).ceil() as usize;
        let exact = all[rank.max(1) - 1] as f64 / 1e9;
        let Some(estimate) = estimates
            .iter()
            .find(|s| s.label("consumer") == *consumer)
            .map(|s| s.value)
        else {
            problems.push(format!("{consumer}: no histogram_quantile answer"));
            continue;
        };
        let mut edges: Vec<f64> = buckets
            .iter()
            .filter(|s| s.label("consumer") == *consumer)
            .filter_map(|s| s.label("le").parse::<f64>().ok())
            .filter(|le| le.is_finite())
            .collect();
        edges.sort_by(f64::total_cmp);
        edges.dedup();
        let prom_count = counts
            .iter()
            .find(|s| s.label("consumer") == *consumer)
            .map_or(f64::NAN, |s| s.value);
        let api_count: u64 = breakers.iter().map(|own| own[c].latency_histogram().count()).sum();
        // The bucket (lo, hi] holding the exact P99, and its neighbours.
        let hi_at = edges.partition_point(|&e| e < exact);
        let edge = |i: isize| -> f64 {
            if i < 0 {
                0.0
            } else {
                edges.get(i as usize).copied().unwrap_or(f64::INFINITY)
            }
        };
        let (lo, hi) = (edge(hi_at as isize - 1), edge(hi_at as isize));
        let near_lo = lo > 0.0 && (exact - lo) <= 0.01 * lo;
        let near_hi = hi.is_finite() && (hi - exact) <= 0.01 * hi;
        let allowed_lo = if near_lo { edge(hi_at as isize - 2) } else { lo };
        let allowed_hi = if near_hi { edge(hi_at as isize + 1) } else { hi };
        let within = estimate >= allowed_lo && estimate <= allowed_hi;
        println!(
            "    {consumer:<8} exact {:>9.3} ms ({} calls)  estimate {:>9.3} ms  bucket ({:.3}, {:.3}] ms{}  {}",
            exact * 1e3,
            all.len(),
            estimate * 1e3,
            lo * 1e3,
            hi * 1e3,
            if near_lo || near_hi {
                " (within 1% of an edge: a neighbour allowed)"
            } else {
                ""
            },
            if within { "ok" } else { "OUTSIDE" }
        );
        println!(
            "             calls: {} recorded, {} in breaker_call_duration_seconds_count, {} in latency_histogram().count()",
            all.len(),
            prom_count,
            api_count
        );
        if !within {
            problems.push(format!(
                "{consumer}: estimate {:.3} ms outside ({:.3}, {:.3}] ms around the exact P99 {:.3} ms",
                estimate * 1e3,
                allowed_lo * 1e3,
                allowed_hi * 1e3,
                exact * 1e3
            ));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        fail(format!("fleet P99: {problems:?}"))
    }
}

/// (c): `breaker_open_seconds_total` against the time the monitor saw each breaker OPEN.
fn check_open_seconds(prom: &Prometheus, breakers: &[Vec<Breaker>], open_truth: &[Duration]) -> Result<(), String> {
    let counters = prom.query("breaker_open_seconds_total")?;
    println!("open seconds per instance and consumer: monitor (state() every ~1 ms) vs breaker_open_seconds_total:");
    let mut problems = Vec::new();
    for (i, (instance, _)) in INSTANCES.iter().enumerate() {
        for (c, (consumer, _)) in CONSUMERS.iter().enumerate() {
            let truth = open_truth[i * CONSUMERS.len() + c].as_secs_f64();
            let counter = counters
                .iter()
                .find(|s| s.label("instance") == *instance && s.label("consumer") == *consumer)
                .map(|s| s.value);
            let snapshot = breakers[i][c].snapshot();
            let tolerance = 0.1 + 0.05 * truth;
            let ok = counter.is_some_and(|v| (v - truth).abs() <= tolerance);
            println!(
                "    {instance}/{consumer:<8} monitor {truth:>7.3} s  counter {:>7}  snapshot.open_time_total {:>7.3} s  trips {:>2}  {}",
                counter.map_or("missing".to_string(), |v| format!("{v:.3} s")),
                snapshot.open_time_total.as_secs_f64(),
                snapshot.trip_count,
                if ok { "ok" } else { "OFF" }
            );
            if !ok {
                problems.push(format!(
                    "{instance}/{consumer}: counter {counter:?} s against {truth:.3} s seen open (tolerance {tolerance:.3} s)"
                ));
            }
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        fail(format!("breaker_open_seconds_total: {problems:?}"))
    }
}
