//! `locus serve`: an OpenAI-compatible HTTP server over one placed model.
//!
//! Threads: the main thread loads the model and then runs the [`engine`]'s step loop (it is
//! the worker pool's pinned thread 0); one thread accepts connections; each connection has a
//! thread that reads requests ([`http`]), checks them ([`api`]), hands generation jobs to the
//! engine through a channel and writes what comes back. The port is open from the start:
//! `/health` answers 503 while the model loads.
//!
//! Limits: the request head and body sizes, a deadline for each request to arrive and for an
//! idle keep-alive connection, a write timeout, a cap on open connections and on queued
//! requests (503 with `Retry-After` beyond it). SIGTERM or SIGINT: stop accepting, refuse what
//! is queued, give running streams [`SHUTDOWN_GRACE`] to finish (then end them cleanly with
//! `finish_reason: "length"`), exit 0.

pub mod api;
pub mod engine;
pub mod http;
pub mod llamacpp;
pub mod metrics;
mod native;
pub mod native_req;

use std::fmt;
use std::io::{self, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::json::Json;
use crate::model::chat::{ChatFormat, ChatTemplate};
use crate::model::forward::KvType;
use crate::model::harmony;
use crate::model::tokenizer::Tokenizer;
use crate::model::{ModelError, ModelFile};
use crate::runtime::RuntimeError;
use api::{ApiError, Context, Envelope, Generate, Kind};
use engine::{EngineOptions, Event, Job};
use metrics::Metrics;

/// Running streams get this long to finish after SIGTERM or SIGINT.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Options of `locus serve`.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    pub model: PathBuf,
    pub host: String,
    pub port: u16,
    /// Sequence slots (`-np`).
    pub slots: usize,
    /// Tokens of all slots together (`-c`, as llama-server's: each slot gets `ctx / slots`);
    /// `None`: as `locus run` chooses, for all slots together.
    pub ctx: Option<usize>,
    pub numa: crate::placement::Options,
    pub api_key: Option<String>,
    /// Each request must arrive within this long; idle connections close after it; a client
    /// that reads nothing for this long is dropped.
    pub timeout: Duration,
    pub kv_type: KvType,
    /// Requests that may wait for a slot.
    pub queue: usize,
    pub max_connections: usize,
    pub max_body: usize,
    pub alias: Option<String>,
    pub chat_template: Option<ChatFormat>,
    /// A chat message's text may write control tokens (llama-server's behaviour).
    pub parse_special_in_messages: bool,
    pub verbose: bool,
    /// llama-server's server-wide defaults and switches.
    pub llama: native_req::LlamaOptions,
}

/// The largest request head.
pub const MAX_HEAD: usize = 16 << 10;

/// What the connections need once the model is loaded.
struct Ready {
    tokenizer: &'static Tokenizer,
    template: Result<ChatTemplate, String>,
    names: Vec<String>,
    ctx: usize,
    n_ctx_train: usize,
}

/// Shared by every thread; lives as long as the process.
struct Server {
    opts: ServeOptions,
    ready: OnceLock<Ready>,
    metrics: Metrics,
    /// Taken (set to `None`) when shutdown begins.
    jobs: Mutex<Option<Sender<Job>>>,
    shutdown: &'static AtomicBool,
    next_id: AtomicU64,
}

/// Why the server could not start.
#[derive(Debug)]
pub enum ServeError {
    /// The model could not be placed, loaded or given its threads.
    Runtime(RuntimeError),
    /// The address could not be listened on.
    Listen {
        host: String,
        port: u16,
        err: io::Error,
    },
    /// Another start-up step failed: what, and the OS's word.
    Start { what: &'static str, err: io::Error },
    /// The slots together need more than this machine has: what they need, in words.
    TooLarge(String),
}

impl fmt::Display for ServeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServeError::Runtime(e) => write!(f, "{e}"),
            ServeError::Listen { host, port, err } => write!(
                f,
                "serve: cannot listen on {host}:{port}: {err}{}",
                listen_hint(err)
            ),
            ServeError::Start { what, err } => write!(f, "serve: {what}: {err}"),
            ServeError::TooLarge(why) => write!(f, "serve: {why}"),
        }
    }
}

impl std::error::Error for ServeError {}

/// What to try where listening failed, by the OS's reason.
fn listen_hint(err: &io::Error) -> &'static str {
    match err.kind() {
        io::ErrorKind::AddrInUse => " (another server on that port? try --port)",
        io::ErrorKind::PermissionDenied => " (a port below 1024 needs privileges; try --port 8080)",
        io::ErrorKind::AddrNotAvailable => {
            " (no interface of this host has that address; try --host 127.0.0.1)"
        }
        _ => "",
    }
}

/// `--host` as the resolver takes it: an IPv6 literal loses the brackets of its URL form
/// (`[::1]` is `::1`).
fn bind_host(host: &str) -> &str {
    host.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
}

impl From<RuntimeError> for ServeError {
    fn from(e: RuntimeError) -> Self {
        ServeError::Runtime(e)
    }
}

impl From<ModelError> for ServeError {
    fn from(e: ModelError) -> Self {
        ServeError::Runtime(e.into())
    }
}

/// Runs the server until SIGTERM or SIGINT; returns once it has shut down.
pub fn run(opts: &ServeOptions) -> Result<(), ServeError> {
    if let Err(e) = crate::sys::signal::catch_shutdown() {
        crate::diagln!(
            "locus: warning: cannot catch SIGTERM/SIGINT ({e}); they will end the server at once"
        );
    }
    let listener = TcpListener::bind((bind_host(&opts.host), opts.port)).map_err(|err| {
        ServeError::Listen {
            host: opts.host.clone(),
            port: opts.port,
            err,
        }
    })?;
    let addr = listener.local_addr().map_err(|err| ServeError::Start {
        what: "cannot read the listening address",
        err,
    })?;
    let (tx, rx) = mpsc::channel();
    // The process's own state: leaked, so every thread may hold it until exit.
    let server: &'static Server = Box::leak(Box::new(Server {
        opts: opts.clone(),
        ready: OnceLock::new(),
        metrics: Metrics::new(opts.slots),
        jobs: Mutex::new(Some(tx)),
        shutdown: crate::sys::signal::interrupt_flag(),
        next_id: AtomicU64::new(1),
    }));
    crate::diagln!(
        "locus: listening on http://{addr} (loading {})",
        opts.model.display()
    );
    let acceptor = std::thread::Builder::new()
        .name("accept".into())
        .spawn(move || accept_loop(server, listener))
        .map_err(|err| ServeError::Start {
            what: "cannot start the accepting thread",
            err,
        })?;

    let started = Instant::now();
    let file: &'static ModelFile = Box::leak(Box::new(ModelFile::open(&opts.model)?));
    let placement = Box::leak(Box::new(crate::runtime::place(
        file,
        &opts.numa,
        opts.verbose,
    )?));
    let loaded = Box::leak(Box::new(crate::runtime::LoadedModel::load_placed(
        file, placement, started,
    )?));
    let pool = crate::runtime::pool_of(placement)?;
    let audit = crate::placement::audit::audit(placement, &loaded.model.weights, file);
    server
        .metrics
        .set_placement(placement.plan.mode.name().to_string(), audit.locality);
    let ctx = native::slot_context(crate::runtime::context_size(loaded, opts.ctx), opts.slots)?;
    crate::runtime::warn_beyond_training(loaded, ctx);
    check_memory(loaded, &pool, opts, ctx)?;
    let eopts = EngineOptions {
        slots: opts.slots,
        ctx,
        grace: SHUTDOWN_GRACE,
    };
    let mut engine = engine::Engine::new(
        &loaded.model,
        &loaded.tokenizer,
        &pool,
        rx,
        &server.metrics,
        eopts,
        opts.kv_type,
    )?;
    // Each slot's cache on the nodes whose threads write it, audited by /metrics.
    let regions = crate::runtime::place_cache(placement, engine.kv_blocks());
    server.metrics.set_kv_cache(regions, engine.kv_copies());
    check_mappings(opts)?;
    let template = ChatTemplate::choose(opts.chat_template, loaded.tokenizer.chat_template())
        .map_err(|e| e.to_string());
    let mut names = Vec::new();
    names.extend(native::aliases(opts.alias.as_deref()));
    if let Some(f) = opts
        .model
        .file_name()
        .map(|f| f.to_string_lossy().to_string())
    {
        names.push(f.clone());
        if let Some(stem) = f.strip_suffix(".gguf") {
            names.push(stem.to_string());
        }
    }
    if names.is_empty() {
        names.push("model".into());
    }
    let _ = server.ready.set(Ready {
        tokenizer: &loaded.tokenizer,
        template,
        names,
        ctx,
        n_ctx_train: loaded.model.config.n_ctx_train,
    });
    crate::diagln!(
        "locus: ready in {:.1} s: {} slot{} of {ctx} tokens, {} threads, numa {} (locality {}), on http://{addr}",
        started.elapsed().as_secs_f64(),
        opts.slots,
        if opts.slots == 1 { "" } else { "s" },
        pool.threads(),
        placement.plan.mode.name(),
        audit.locality.map_or("unknown".to_string(), |l| format!("{:.2}", l))
    );
    engine.run(server.shutdown);
    // Shutdown: no new jobs; the connections finish writing what the engine sent them.
    drop(server.jobs.lock().unwrap_or_else(|e| e.into_inner()).take());
    let _ = acceptor.join();
    let deadline = Instant::now() + Duration::from_secs(2);
    while server.metrics.open_connections() > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    crate::diagln!("locus: server stopped");
    Ok(())
}

/// The whole server's caches and scratch (every slot's, and the shared workspace's) against
/// the machine's memory, before any is allocated: each slot alone may fit where all do not.
fn check_memory(
    loaded: &crate::runtime::LoadedModel,
    pool: &crate::pool::Pool,
    opts: &ServeOptions,
    ctx: usize,
) -> Result<(), ServeError> {
    let Some(memory) = crate::sys::memory::physical_bytes() else {
        return Ok(());
    };
    // Each slot's cache and scratch, and the shared workspace's scratch.
    let slots = opts.slots as u64;
    let need = loaded
        .model
        .state_bytes(ctx, pool, opts.kv_type)
        .and_then(|b| {
            b.kv.checked_mul(slots)?
                .checked_add(b.scratch.checked_mul(slots + 1)?)
        });
    match need {
        Some(n) if n <= memory => Ok(()),
        _ => Err(ServeError::TooLarge(format!(
            "{} slot{} of {ctx} tokens need {} of KV cache and scratch, and this machine has {} \
             of memory; use fewer slots (-np) or a smaller context (-c)",
            opts.slots,
            if opts.slots == 1 { "" } else { "s" },
            need.map_or("more than 16 EiB".into(), gib),
            gib(memory)
        ))),
    }
}

fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

/// Memory mappings each connection's thread takes (its stack and the signal stack, each with
/// a guard page).
const MAPS_PER_CONNECTION: usize = 4;
/// Mappings kept free beyond the connections' (the allocator's arenas, files, the pool).
const MAPS_SPARE: usize = 1024;

/// Whether the kernel's map limit leaves room for `--max-connections` threads once the slots
/// are allocated: past it a thread cannot start (and Rust aborts the process when a thread's
/// signal stack cannot be mapped), so a server that would hit it does not say ready.
fn check_mappings(opts: &ServeOptions) -> Result<(), ServeError> {
    let (Some(used), Some(max)) = (
        crate::sys::memory::map_count(),
        crate::sys::memory::max_map_count(),
    ) else {
        return Ok(());
    };
    let want = opts
        .max_connections
        .saturating_mul(MAPS_PER_CONNECTION)
        .saturating_add(MAPS_SPARE);
    if used.saturating_add(want) <= max {
        return Ok(());
    }
    Err(ServeError::TooLarge(format!(
        "{} slot{} hold {used} memory mappings of the kernel's {max} (vm.max_map_count), and \
         {} connections need about {want} more; use fewer slots (-np) or connections \
         (--max-connections), or raise vm.max_map_count",
        opts.slots,
        if opts.slots == 1 { "" } else { "s" },
        opts.max_connections
    )))
}

/// Accepts connections until shutdown, one thread each, up to the connection cap (beyond it:
/// 503 and close).
fn accept_loop(server: &'static Server, listener: TcpListener) {
    while !server.shutdown.load(Ordering::SeqCst) {
        match crate::sys::poll::wait_readable(&listener, Duration::from_millis(100)) {
            Ok(true) => {}
            Ok(false) => continue,
            Err(e) => {
                crate::diagln!("locus: warning: {e}");
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        }
        let Ok((stream, _)) = listener.accept() else {
            continue;
        };
        let Some(guard) = server.metrics.open_connection(server.opts.max_connections) else {
            let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
            let e = ApiError::new(
                503,
                "unavailable_error",
                "too many open connections; retry later",
            );
            let mut s = &stream;
            let _ = send_error(&mut s, &e, false);
            server.metrics.answered("-", 503);
            continue;
        };
        // A second handle answers 503 where no thread can be started for the connection.
        let spare = stream.try_clone();
        let spawned = std::thread::Builder::new()
            .name("conn".into())
            .spawn(move || {
                let _guard = guard;
                connection(server, stream);
            });
        if let Err(e) = spawned {
            crate::diagln!("locus: warning: cannot start a connection thread: {e}");
            if let Ok(s) = spare {
                refuse_unthreaded(server, &s);
            }
        }
    }
}

/// Answers 503 on a connection that got no thread of its own (the accepting thread writes it,
/// under a short write timeout).
fn refuse_unthreaded(server: &Server, s: &TcpStream) {
    let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
    let e = ApiError::new(
        503,
        "unavailable_error",
        "the server cannot take another connection now; retry later",
    );
    let mut w = s;
    let _ = send_error(&mut w, &e, false);
    server.metrics.answered("-", 503);
}

fn send_error(w: &mut impl Write, e: &ApiError, keep: bool) -> io::Result<()> {
    let mut headers = Vec::new();
    if e.status == 503 {
        headers.push(("Retry-After", "1".to_string()));
    }
    if e.status == 401 {
        headers.push(("WWW-Authenticate", "Bearer".to_string()));
    }
    http::write_response(
        w,
        e.status,
        &headers,
        "application/json",
        e.body().as_bytes(),
        keep,
    )
}

fn send_json(w: &mut impl Write, status: u16, j: &Json, keep: bool) -> io::Result<()> {
    http::write_response(
        w,
        status,
        &[],
        "application/json",
        j.to_string().as_bytes(),
        keep,
    )
}

/// Serves one connection's requests until it closes, fails or times out.
fn connection(server: &'static Server, stream: TcpStream) {
    let o = &server.opts;
    let _ = stream.set_nodelay(true);
    let _ = stream.set_write_timeout(Some(o.timeout));
    let Ok(read_half) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(read_half);
    let limits = http::Limits {
        max_head: MAX_HEAD,
        max_body: o.max_body,
        timeout: o.timeout,
    };
    loop {
        let mut w = &stream;
        let req = match http::read_request(&mut reader, &mut w, &limits) {
            Ok(r) => r,
            Err(e) => {
                if let Some(status) = e.status() {
                    let kind = if status == 408 {
                        "timeout_error"
                    } else {
                        "invalid_request_error"
                    };
                    let _ = send_error(&mut w, &ApiError::new(status, kind, e.message()), false);
                    server.metrics.answered("-", status);
                }
                return;
            }
        };
        let keep = req.keep_alive && !server.shutdown.load(Ordering::SeqCst);
        let (endpoint, result) = route(server, &req, &stream, keep);
        match result {
            Ok(status) => server.metrics.answered(endpoint, status),
            Err(_) => {
                server.metrics.answered(endpoint, CLIENT_CLOSED);
                return;
            }
        }
        if !keep {
            return;
        }
    }
}

/// The status counted for a request whose client left before its answer was written (nginx's
/// 499); never sent.
pub const CLIENT_CLOSED: u16 = 499;

/// The API key, kept as keyed digests: a key given is digested and the digests compared in
/// constant time, so how long a check takes depends neither on where a wrong key differs
/// from the right one nor on the right key's length.
struct Secret {
    keys: [std::hash::RandomState; 2],
    digest: [u64; 2],
}

impl Secret {
    fn new(key: &[u8]) -> Secret {
        let keys = [std::hash::RandomState::new(), std::hash::RandomState::new()];
        let digest = Secret::digest_with(&keys, key);
        Secret { keys, digest }
    }

    fn digest_with(keys: &[std::hash::RandomState; 2], b: &[u8]) -> [u64; 2] {
        use std::hash::BuildHasher;
        [keys[0].hash_one(b), keys[1].hash_one(b)]
    }

    fn matches(&self, given: &[u8]) -> bool {
        let d = Secret::digest_with(&self.keys, given);
        let diff = (d[0] ^ self.digest[0]) | (d[1] ^ self.digest[1]);
        std::hint::black_box(diff) == 0
    }
}

/// Whether `req` carries the API key `key` (`Authorization: Bearer KEY`, the scheme's name in
/// any case, RFC 9110 11.1).
fn authorized(req: &http::Request, key: &str) -> bool {
    static SECRET: OnceLock<Secret> = OnceLock::new();
    let secret = SECRET.get_or_init(|| Secret::new(key.as_bytes()));
    let given = req
        .header("authorization")
        .map(|h| h.trim_start())
        .and_then(|h| h.split_once([' ', '\t']))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map_or("", |(_, k)| k.trim());
    secret.matches(given.as_bytes())
}

/// Answers one request; returns the endpoint's name (for the metrics) and the status sent.
fn route(
    server: &'static Server,
    req: &http::Request,
    stream: &TcpStream,
    keep: bool,
) -> (&'static str, io::Result<u16>) {
    // llama-server's own endpoints and the CORS preflight (each checks the key itself).
    if let Some(answered) = native::route(server, req, stream, keep) {
        return answered;
    }
    // A HEAD request's answer is GET's head without its body.
    let mut w = http::HeadOnly::new(stream, req.method == "HEAD");
    let path = req.path.trim_end_matches('/');
    let endpoint: &'static str = match path {
        "/health" | "/v1/health" => "/health",
        "/v1/models" | "/models" => "/v1/models",
        "/metrics" => "/metrics",
        "/v1/completions" | "/completions" => "/v1/completions",
        "/v1/chat/completions" | "/chat/completions" => "/v1/chat/completions",
        "/tokenize" => "/tokenize",
        "/detokenize" => "/detokenize",
        _ => "other",
    };
    let fail = |w: &mut http::HeadOnly<&TcpStream>, e: ApiError| {
        (endpoint, send_error(w, &e, keep).map(|_| e.status))
    };
    // The key is checked before anything else is said about the request (but /health).
    if let Some(key) = &server.opts.api_key {
        if endpoint != "/health" && !authorized(req, key) {
            return fail(
                &mut w,
                ApiError::new(
                    401,
                    "authentication_error",
                    "a valid API key is required (Authorization: Bearer KEY)",
                ),
            );
        }
    }
    let post = matches!(
        endpoint,
        "/v1/completions" | "/v1/chat/completions" | "/tokenize" | "/detokenize"
    );
    if endpoint == "other" {
        return fail(
            &mut w,
            ApiError::new(404, "not_found_error", format!("no endpoint {}", req.path)),
        );
    }
    let method_ok = if post {
        req.method == "POST"
    } else {
        req.method == "GET" || req.method == "HEAD"
    };
    if !method_ok {
        let want = if post { "POST" } else { "GET" };
        return fail(
            &mut w,
            ApiError::new(
                405,
                "invalid_request_error",
                format!("{} takes {want}", endpoint),
            ),
        );
    }
    if endpoint == "/health" {
        let (status, what) = if server.shutdown.load(Ordering::SeqCst) {
            (503, "shutting down")
        } else if server.ready.get().is_some() {
            (200, "ok")
        } else {
            (503, "loading model")
        };
        let j = Json::obj([("status", Json::str(what))]);
        return (
            endpoint,
            send_json(&mut w, status, &j, keep).map(|_| status),
        );
    }
    if endpoint == "/metrics" {
        let text = server.metrics.render();
        let r = http::write_response(
            &mut w,
            200,
            &[],
            "text/plain; version=0.0.4",
            text.as_bytes(),
            keep,
        );
        return (endpoint, r.map(|_| 200));
    }
    let Some(ready) = server.ready.get() else {
        return fail(
            &mut w,
            ApiError::new(503, "unavailable_error", "the model is loading"),
        );
    };
    let r = match endpoint {
        "/v1/models" => {
            let j = Json::obj([
                ("object", Json::str("list")),
                (
                    "data",
                    Json::Arr(vec![Json::obj([
                        ("id", Json::str(ready.names[0].clone())),
                        // llama-server's: every name the model answers to.
                        (
                            "aliases",
                            Json::Arr(ready.names.iter().map(|n| Json::str(n.clone())).collect()),
                        ),
                        ("object", Json::str("model")),
                        ("created", Json::num(unix_now() as f64)),
                        ("owned_by", Json::str("locus")),
                        (
                            "meta",
                            Json::obj([
                                ("n_ctx_slot", Json::num(ready.ctx as f64)),
                                ("n_ctx_train", Json::num(ready.n_ctx_train as f64)),
                                ("n_vocab", Json::num(ready.tokenizer.n_vocab() as f64)),
                                ("slots", Json::num(server.opts.slots as f64)),
                            ]),
                        ),
                    ])]),
                ),
            ]);
            send_json(&mut w, 200, &j, keep).map(|_| 200)
        }
        "/tokenize" | "/detokenize" => match tokens_endpoint(endpoint, &req.body, ready) {
            Ok(j) => send_json(&mut w, 200, &j, keep).map(|_| 200),
            Err(e) => send_error(&mut w, &e, keep).map(|_| e.status),
        },
        _ => {
            let kind = if endpoint == "/v1/completions" {
                Kind::Completion
            } else {
                Kind::Chat
            };
            generate(server, ready, req, stream, kind, keep)
        }
    };
    (endpoint, r)
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// `/tokenize` (`{"content", "add_special", "with_pieces"}`) and `/detokenize` (`{"tokens"}`),
/// as llama-server has them.
fn tokens_endpoint(endpoint: &str, body: &[u8], ready: &Ready) -> Result<Json, ApiError> {
    let body = Json::parse(body).map_err(ApiError::not_json)?;
    let tok = ready.tokenizer;
    let flag = |name: &str| match body.get(name) {
        None | Some(Json::Null) => Ok(false),
        Some(Json::Bool(b)) => Ok(*b),
        Some(_) => Err(ApiError::bad(name, format!("{name} must be true or false"))),
    };
    if endpoint == "/tokenize" {
        let Some(Json::Str(text)) = body.get("content") else {
            return Err(ApiError::bad("content", "content must be a string"));
        };
        let ids = tok.encode(text, flag("add_special")?, true);
        let list = if flag("with_pieces")? {
            ids.iter()
                .map(|&id| {
                    let piece = String::from_utf8_lossy(&tok.token_to_piece(id, true)).to_string();
                    Json::obj([("id", Json::num(id)), ("piece", Json::Str(piece))])
                })
                .collect()
        } else {
            ids.iter().map(|&id| Json::num(id)).collect()
        };
        return Ok(Json::obj([("tokens", Json::Arr(list))]));
    }
    let Some(Json::Arr(items)) = body.get("tokens") else {
        return Err(ApiError::bad(
            "tokens",
            "tokens must be an array of token ids",
        ));
    };
    let ids = items
        .iter()
        .map(|v| match v {
            Json::Num(n) if n.fract() == 0.0 && *n >= 0.0 && (*n as usize) < tok.n_vocab() => {
                Ok(*n as u32)
            }
            _ => Err(ApiError::bad(
                "tokens",
                format!("token ids must be whole numbers below {}", tok.n_vocab()),
            )),
        })
        .collect::<Result<Vec<u32>, _>>()?;
    let text = String::from_utf8_lossy(&tok.decode(&ids, true)).to_string();
    Ok(Json::obj([("content", Json::Str(text))]))
}

/// Sets the job's cancel flag when the connection's handler ends, however it ends.
struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// What a submitted request holds until it is answered: its place in the queue (with the
/// slots, it bounds what may wait) and the flag that cancels its job when the handler returns.
struct Submitted<'m> {
    _place: metrics::InFlight<'m>,
    _cancel: CancelOnDrop,
}

/// Takes a queue place and hands a job to the engine: its events, and what to hold until the
/// request is answered; or the 503 to answer (and whether the connection may stay open).
fn submit(
    server: &Server,
    prompt: Vec<u32>,
    params: engine::Params,
    extra: llamacpp::JobExtra,
) -> Result<(mpsc::Receiver<engine::Event>, Submitted<'_>), (ApiError, bool)> {
    let Some(place) = server.metrics.enter(server.opts.queue) else {
        let e = ApiError::new(
            503,
            "unavailable_error",
            "every slot is busy and the queue is full; retry later",
        );
        return Err((e, true));
    };
    let (tx, rx) = mpsc::channel();
    let cancelled = Arc::new(AtomicBool::new(false));
    let cancel = CancelOnDrop(cancelled.clone());
    let job = Job {
        prompt,
        params,
        events: tx,
        cancelled,
        queued_at: Instant::now(),
        extra,
    };
    let sent = server
        .jobs
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .is_some_and(|s| s.send(job).is_ok());
    if !sent {
        server.metrics.dequeued();
        let e = ApiError::new(503, "unavailable_error", "the server is shutting down");
        return Err((e, false));
    }
    Ok((
        rx,
        Submitted {
            _place: place,
            _cancel: cancel,
        },
    ))
}

/// How often a waiting connection checks that its client is still there.
const PEER_CHECK: Duration = Duration::from_millis(200);

/// One server-sent event carrying `j`.
fn out_send(j: &Json) -> Vec<u8> {
    format!("data: {j}\n\n").into_bytes()
}

/// A completion or chat request: queued for the engine, answered whole or streamed.
fn generate(
    server: &'static Server,
    ready: &Ready,
    req: &http::Request,
    stream: &TcpStream,
    kind: Kind,
    keep: bool,
) -> io::Result<u16> {
    let mut w = stream;
    let cx = Context {
        tokenizer: ready.tokenizer,
        template: ready.template.as_ref().map_err(Clone::clone),
        model_names: &ready.names,
        ctx: ready.ctx,
        parse_special_in_messages: server.opts.parse_special_in_messages,
    };
    let mut g = match Generate::read(kind, &req.body, &cx) {
        Ok(g) => g,
        Err(e) => return send_error(&mut w, &e, keep).map(|_| e.status),
    };
    native_req::apply_defaults(&mut g, &req.body, &server.opts.llama);
    let (rx, _submitted) = match submit(
        server,
        g.prompt.clone(),
        g.params.clone(),
        Default::default(),
    ) {
        Ok(s) => s,
        Err((e, keep_open)) => return send_error(&mut w, &e, keep && keep_open).map(|_| 503),
    };
    let id = format!(
        "{}-{}",
        if kind == Kind::Chat {
            "chatcmpl"
        } else {
            "cmpl"
        },
        server.next_id.fetch_add(1, Ordering::Relaxed)
    );
    let model = &ready.names[0];
    let env = Envelope {
        id: &id,
        created: unix_now(),
        model,
        kind,
        harmony: kind == Kind::Chat
            && matches!(&ready.template, Ok(t) if t.format == ChatFormat::GptOss),
    };
    // Waits for the next event, checking that the client is still there after each one (a
    // generation step) and meanwhile: a response not yet begun asks a client that sent a FIN
    // whether it left ([`http::PeerWatch`]); a stream's own writes tell.
    let mut watch = http::PeerWatch::new(req);
    let mut next = |begun: bool| loop {
        let gone = |watch: &mut http::PeerWatch| {
            if begun {
                http::peer_closed(stream)
            } else {
                watch.gone(stream)
            }
        };
        let ev = rx.recv_timeout(PEER_CHECK);
        if !matches!(ev, Err(RecvTimeoutError::Disconnected)) && gone(&mut watch) {
            return Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "client gone",
            ));
        }
        match ev {
            Ok(ev) => return Ok(ev),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                return Ok(Event::Refused("the engine stopped".into()));
            }
        }
    };
    if !g.stream {
        let (mut text, mut tokens) = (String::new(), Vec::new());
        loop {
            match next(false)? {
                Event::Text {
                    text: t,
                    tokens: ids,
                    ..
                } => {
                    text.push_str(&t);
                    tokens.extend(ids);
                }
                Event::Done {
                    finish,
                    usage,
                    detail,
                } => {
                    let mut j = env.response(
                        &text,
                        finish,
                        api::usage(usage),
                        g.return_tokens.then_some(&tokens[..]),
                    );
                    native::add_timings(&mut j, &detail.timings);
                    return send_json(&mut w, 200, &j, keep).map(|_| 200);
                }
                Event::Refused(why) => {
                    let e = ApiError::new(503, "unavailable_error", why);
                    return send_error(&mut w, &e, false).map(|_| 503);
                }
            }
        }
    }
    if req.http10 {
        // The stream's end is the connection's close.
        let r = stream_events(&mut w, keep, true, &env, &g, || next(true));
        let _ = stream.shutdown(std::net::Shutdown::Both);
        return r;
    }
    stream_events(&mut w, keep, false, &env, &g, || next(true))
}

/// A streamed response: its events as server-sent events until it is done.
fn stream_events(
    w: &mut &TcpStream,
    keep: bool,
    http10: bool,
    env: &Envelope,
    g: &Generate,
    mut next: impl FnMut() -> io::Result<Event>,
) -> io::Result<u16> {
    let mut out = http::Chunked::open(w, "text/event-stream", keep, http10)?;
    let chat = env.kind == Kind::Chat;
    // A chat stream opens with the role alone, as llama-server's does (with its first token).
    let mut opened = !chat;
    // Harmony: the whole answer so far, split anew at each step.
    let (mut answer, mut harmony) = (String::new(), harmony::Stream::default());
    loop {
        match next()? {
            Event::Text {
                text,
                tokens,
                timings,
                ..
            } => {
                let role = (!opened).then(|| env.role_chunk());
                opened = true;
                let ids = g.return_tokens.then_some(&tokens[..]);
                // A chat delta says what is new in the message: nothing new, no chunk (as
                // there), unless the tokens were asked for.
                let content = if env.harmony {
                    answer.push_str(&text);
                    let (r, c) = harmony.update(&answer, false);
                    (!r.is_empty() || !c.is_empty() || g.return_tokens)
                        .then(|| env.harmony_chunk(&r, &c, ids))
                } else {
                    (!chat || !text.is_empty() || g.return_tokens)
                        .then(|| env.chunk(Some(&text), None, ids))
                };
                let mut batch: Vec<Json> = role.into_iter().chain(content).collect();
                // The timings ride on the last chunk of a token's batch, as there.
                if let (true, Some(last)) = (g.timings_per_token, batch.last_mut()) {
                    native::add_timings(last, &timings);
                }
                for j in &batch {
                    out.send(&out_send(j))?;
                }
            }
            Event::Done {
                finish,
                usage,
                detail,
            } => {
                if !opened {
                    out.send(&out_send(&env.role_chunk()))?;
                }
                if env.harmony {
                    // What was held back in case a marker was being cut.
                    let (r, c) = harmony.update(&answer, true);
                    if !r.is_empty() || !c.is_empty() {
                        out.send(&out_send(&env.harmony_chunk(&r, &c, None)))?;
                    }
                }
                let end = env.chunk(None, Some(finish), None);
                // llama-server's text-completion stream ends with one chunk that carries the
                // finish and the usage together, asked for or not.
                let mut last = if chat {
                    vec![end]
                } else {
                    vec![env.with_usage(end, api::usage(usage))]
                };
                if chat && g.stream_usage {
                    last.push(env.usage_chunk(api::usage(usage)));
                }
                // The timings ride on the stream's last chunk (the usage chunk where there is
                // one), as there.
                if let Some(j) = last.last_mut() {
                    native::add_timings(j, &detail.timings);
                }
                for j in &last {
                    out.send(&out_send(j))?;
                }
                out.send(b"data: [DONE]\n\n")?;
                out.finish()?;
                return Ok(200);
            }
            Event::Refused(why) => {
                let e = ApiError::new(503, "unavailable_error", why);
                out.send(format!("data: {}\n\n", e.body()).as_bytes())?;
                out.send(b"data: [DONE]\n\n")?;
                out.finish()?;
                return Ok(503);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_secret_matches_only_the_key() {
        let s = Secret::new(b"k3y-0123456789");
        assert!(s.matches(b"k3y-0123456789"));
        for wrong in [
            &b""[..],
            b"k3y",
            b"k3y-012345678",
            b"k3y-0123456789 ",
            b"K3y-0123456789",
        ] {
            assert!(!s.matches(wrong), "{:?}", String::from_utf8_lossy(wrong));
        }
    }

    #[test]
    fn ipv6_literals_lose_their_brackets_and_bind_errors_their_blame() {
        assert_eq!(bind_host("[::1]"), "::1");
        assert_eq!(bind_host("::1"), "::1");
        assert_eq!(bind_host("0.0.0.0"), "0.0.0.0");
        let hint = |k| listen_hint(&io::Error::from(k));
        assert!(hint(io::ErrorKind::AddrInUse).contains("another server"));
        assert!(!hint(io::ErrorKind::PermissionDenied).contains("another server"));
        assert!(!hint(io::ErrorKind::AddrNotAvailable).contains("another server"));
    }
}
