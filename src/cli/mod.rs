//! The binary's argument parsing (not part of the library): one module per family of
//! commands, the help texts, and the walker and value checks they share.
//!
//! Arguments arrive as OS strings and stay so until a flag says what its value is: a path is
//! taken as it is (any bytes), a prompt or a name must be UTF-8 (one error line otherwise,
//! naming the flag and the offset of the first bad byte), a number is range-checked here, before
//! anything is sized by it. llama.cpp's sentinels are accepted where it has them (`-c 0`,
//! `-n -1`, `-s -1`, `--repeat-last-n -1`).

mod generate;
mod help;
mod serve;
mod tools;

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;

use locus::app::{self, AppError};
use locus::model::forward::KvType;
use locus::placement;
use locus::sys::NodeId;

/// The most worker threads a command starts (llama.cpp allows 512; hosts have up to a few
/// hundred CPUs).
pub const MAX_THREADS: usize = 1024;

/// Why a command did not succeed.
pub enum CliError {
    /// Printed as one line; exit code 2.
    Message(String),
    /// SIGINT stopped the work (after the timing line, where there is one); exit code 130.
    Interrupted,
}

impl From<AppError> for CliError {
    fn from(e: AppError) -> Self {
        match e {
            AppError::Interrupted => CliError::Interrupted,
            e => CliError::Message(e.to_string()),
        }
    }
}

/// Shorthand for a one-line error.
pub fn err<T>(msg: impl Into<String>) -> Result<T, CliError> {
    Err(CliError::Message(msg.into()))
}

/// An argument as the user would read it in a message (invalid bytes as U+FFFD).
pub fn shown(s: &OsStr) -> String {
    s.to_string_lossy().into_owned()
}

/// The longest value a message repeats before cutting it short.
const QUOTE_MAX: usize = 60;

/// A value in quotes for a message: control characters escaped (a newline in a value must not
/// break the error's one line), and cut after [`QUOTE_MAX`] characters.
pub fn quote(v: &str) -> String {
    let mut out = String::from("'");
    for (i, c) in v.chars().enumerate() {
        if i == QUOTE_MAX {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out.push('\'');
    out
}

/// Walks `--flag value`, `--flag=value` and `-f value` arguments.
pub struct Args {
    items: Vec<OsString>,
    i: usize,
}

impl Args {
    pub fn new(items: Vec<OsString>, start: usize) -> Args {
        Args { items, i: start }
    }

    /// The next argument as a flag name (lossy: a non-UTF-8 argument is no flag, and its
    /// caller reports it as unknown) and the value written after `=` in `--flag=value`.
    pub fn next_flag(&mut self) -> Option<(String, Option<OsString>)> {
        let a = self.items.get(self.i)?.clone();
        self.i += 1;
        let bytes = a.as_bytes();
        if bytes.starts_with(b"--") {
            if let Some(eq) = bytes.iter().position(|&b| b == b'=') {
                let name = String::from_utf8_lossy(&bytes[..eq]).into_owned();
                return Some((name, Some(OsString::from_vec(bytes[eq + 1..].to_vec()))));
            }
        }
        Some((shown(&a), None))
    }

    /// The argument [`Args::next_flag`] returned last, as the OS gave it (a positional
    /// argument, such as an output path).
    pub fn current(&self) -> OsString {
        self.items[self.i.saturating_sub(1)].clone()
    }

    /// All the arguments, for a command line echoed back (the bench chart's footer).
    pub fn all(&self) -> &[OsString] {
        &self.items
    }

    /// The flag's value, as the OS gave it.
    pub fn value_os(&mut self, flag: &str, inline: Option<OsString>) -> Result<OsString, CliError> {
        if let Some(v) = inline {
            return Ok(v);
        }
        let v = match self.items.get(self.i) {
            Some(v) => v.clone(),
            None => return err(format!("{flag} needs a value")),
        };
        self.i += 1;
        Ok(v)
    }

    /// The flag's value, which must be UTF-8 (a name, a number, a list).
    pub fn value(&mut self, flag: &str, inline: Option<OsString>) -> Result<String, CliError> {
        utf8(flag, "value", self.value_os(flag, inline)?)
    }

    /// The flag's value as a path: any bytes.
    pub fn path(&mut self, flag: &str, inline: Option<OsString>) -> Result<PathBuf, CliError> {
        Ok(PathBuf::from(self.value_os(flag, inline)?))
    }

    /// The flag's value as text the model reads (a prompt, a system message): UTF-8 required.
    pub fn text(&mut self, flag: &str, inline: Option<OsString>) -> Result<String, CliError> {
        utf8(flag, "text", self.value_os(flag, inline)?)
    }
}

/// `v` as UTF-8, or an error naming the flag and the first bad byte. locus takes prompts as
/// UTF-8 text, as the chat templates and the tokenizers' pre-splitting rules assume.
pub fn utf8(flag: &str, what: &str, v: OsString) -> Result<String, CliError> {
    v.into_string().or_else(|v| {
        let bytes = v.into_vec();
        let at = std::str::from_utf8(&bytes).map_or_else(|e| e.valid_up_to(), |_| 0);
        err(format!(
            "{flag}: the {what} is not valid UTF-8 (first bad byte 0x{:02x} at offset {at})",
            bytes[at]
        ))
    })
}

/// A whole number in `lo..=hi`, or an error naming the flag and the range.
pub fn int<T>(flag: &str, v: &str, lo: T, hi: T) -> Result<T, CliError>
where
    T: std::str::FromStr + PartialOrd + std::fmt::Display + Copy,
{
    let n: T = match v.trim().parse() {
        Ok(n) => n,
        Err(_) => {
            // Say "out of range" for a number too large for the type, not "not a number".
            let t = v.trim();
            let digits = t.strip_prefix('-').unwrap_or(t);
            if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
                return err(format!(
                    "{flag}: {} is out of range ({lo} to {hi})",
                    quote(t)
                ));
            }
            return err(format!("{flag}: {} is not a whole number", quote(v)));
        }
    };
    if n < lo || n > hi {
        return err(format!("{flag}: {n} is out of range ({lo} to {hi})"));
    }
    Ok(n)
}

/// A finite number (no NaN, no infinity), or an error naming the flag.
pub fn real(flag: &str, v: &str) -> Result<f32, CliError> {
    match v.trim().parse::<f32>() {
        Ok(x) if x.is_finite() => Ok(x),
        Ok(_) => err(format!("{flag}: {} is not a finite number", quote(v))),
        Err(_) => err(format!("{flag}: {} is not a number", quote(v))),
    }
}

/// A thread count: 1 to [`MAX_THREADS`].
pub fn threads(flag: &str, v: &str) -> Result<usize, CliError> {
    int(flag, v, 1, MAX_THREADS)
}

/// The KV cache types `-ctk`/`-ctv` take.
pub fn kv_type(flag: &str, v: &str) -> Result<KvType, CliError> {
    KvType::parse(v).ok_or_else(|| {
        CliError::Message(format!(
            "{flag}: {} is not a supported cache type ({})",
            quote(v),
            KvType::NAMES.join(", ")
        ))
    })
}

/// Applies -ctk/-ctv; locus keeps keys and values in one type.
pub fn set_kv(slot: &mut Option<KvType>, flag: &str, v: &str) -> Result<(), CliError> {
    let t = kv_type(flag, v)?;
    match slot {
        Some(prev) if *prev != t => err(format!("{flag}: -ctk and -ctv must name the same type")),
        _ => {
            *slot = Some(t);
            Ok(())
        }
    }
}

/// Handles a placement flag (`--numa`, `--numa-node`, `--pin`, `--strict`, `--hugepages`,
/// `--poll`); returns false for any other flag.
pub fn numa_flag(
    a: &mut Args,
    flag: &str,
    inline: Option<OsString>,
    o: &mut placement::Options,
) -> Result<bool, CliError> {
    match flag {
        "--numa" => {
            let v = a.value(flag, inline)?;
            o.mode = placement::Mode::parse(&v).ok_or_else(|| {
                CliError::Message(format!(
                    "--numa: unknown mode {} (off, distribute, interleave, isolate, mirror, shard, auto)",
                    quote(&v)
                ))
            })?;
        }
        "--numa-node" => o.node = Some(NodeId(int(flag, &a.value(flag, inline)?, 0, u32::MAX)?)),
        "--pin" => {
            o.pin = match a.value(flag, inline)?.as_str() {
                "node" => placement::Pin::Node,
                "core" => placement::Pin::Core,
                v => return err(format!("--pin: unknown value {} (node or core)", quote(v))),
            }
        }
        "--strict" => o.strict = true,
        "--poll" => o.poll = int(flag, &a.value(flag, inline)?, 0, 100)?,
        "--hugepages" => o.hugepages = true,
        _ => return Ok(false),
    }
    Ok(true)
}

/// The unknown-option error of command `cmd`.
pub fn unknown(cmd: &str, flag: &str) -> CliError {
    CliError::Message(format!(
        "{cmd}: unknown option {} (see `locus {cmd} --help`)",
        quote(flag)
    ))
}

/// Prints a help text (stdout) and ends the command.
pub fn print_help(text: &str) -> Result<(), CliError> {
    app::write_stdout(text)?;
    Ok(())
}

/// Runs the command `argv[1]` with the rest of `argv`.
pub fn dispatch(argv: Vec<OsString>) -> Result<(), CliError> {
    let Some(cmd) = argv.get(1).map(|c| shown(c)) else {
        return err("no command given (commands: run, serve, perplexity, imatrix, tokenize, quantize, gen-model, bench, membw, topo, audit; see `locus --help`)");
    };
    let args = Args::new(argv, 2);
    match cmd.as_str() {
        "-h" | "--help" | "help" => print_help(help::MAIN),
        "-V" | "--version" | "version" => print_help(&format!("locus {}\n", env!("CARGO_PKG_VERSION"))),
        "run" => generate::run(args),
        "serve" => serve::serve(args),
        "perplexity" => generate::perplexity(args),
        "imatrix" => generate::imatrix(args),
        "tokenize" => generate::tokenize(args),
        "quantize" => tools::quantize(args),
        "gen-model" => tools::gen_model(args),
        "membw" => tools::membw(args),
        "bench" => tools::bench(args),
        "topo" => tools::topo(args),
        "audit" => tools::audit(args),
        other => err(format!(
            "unknown command {} (commands: run, serve, perplexity, imatrix, tokenize, quantize, gen-model, bench, membw, topo, audit)",
            quote(other)
        )),
    }
}
