//! `locus serve`: the server's flags (llama-server's names where it has them).

use std::path::PathBuf;
use std::time::Duration;

use locus::model::forward::KvType;
use locus::placement;
use locus::serve::ServeOptions;

use super::{err, help, int, numa_flag, print_help, set_kv, threads, unknown, Args, CliError};

/// The most slots `-np` accepts (each holds a whole context's cache).
const MAX_SLOTS: usize = 256;

/// The smallest `-c` (llama-server's minimum too): a chat template alone takes several tokens.
const MIN_CTX: usize = 8;

/// `locus serve`.
pub fn serve(mut a: Args) -> Result<(), CliError> {
    let mut o = ServeOptions {
        model: PathBuf::new(),
        host: "127.0.0.1".into(),
        port: 8080,
        slots: 1,
        ctx: None,
        numa: placement::Options::default(),
        api_key: None,
        timeout: Duration::from_secs(60),
        kv_type: KvType::F16,
        queue: 64,
        max_connections: 256,
        max_body: 8 << 20,
        alias: None,
        chat_template: None,
        parse_special_in_messages: false,
        verbose: false,
        llama: Default::default(),
    };
    let (mut model, mut kv) = (None, None);
    while let Some((flag, inline)) = a.next_flag() {
        if numa_flag(&mut a, &flag, inline.clone(), &mut o.numa)? {
            continue;
        }
        let f = flag.as_str();
        match f {
            "-h" | "--help" => return print_help(help::SERVE),
            "-m" | "--model" => model = Some(a.path(f, inline)?),
            "--host" => o.host = a.value(f, inline)?,
            "--port" => o.port = int(f, &a.value(f, inline)?, 0, u16::MAX)?,
            "-np" | "--parallel" => o.slots = int(f, &a.value(f, inline)?, 1, MAX_SLOTS)?,
            "-c" | "--ctx-size" => {
                let c = int(f, &a.value(f, inline)?, 0, u32::MAX as usize)?;
                if (1..MIN_CTX).contains(&c) {
                    return err(format!(
                        "{f}: {c} tokens hold no prompt and answer; \
                         give at least {MIN_CTX} (0: the model's training context)"
                    ));
                }
                o.ctx = Some(c)
            }
            "-t" | "--threads" => o.numa.threads = Some(threads(f, &a.value(f, inline)?)?),
            "--api-key" => {
                let k = a.text(f, inline)?;
                if k.is_empty() {
                    return err("--api-key: the key is empty");
                }
                o.api_key = Some(k);
            }
            "--timeout" | "-to" => {
                o.timeout = Duration::from_secs(int(f, &a.value(f, inline)?, 1, 86_400)?)
            }
            "--queue" => o.queue = int(f, &a.value(f, inline)?, 0, 1 << 20)?,
            "--max-connections" => o.max_connections = int(f, &a.value(f, inline)?, 1, 1 << 20)?,
            "--max-body" => o.max_body = int(f, &a.value(f, inline)?, 1, 1 << 30)?,
            "-a" | "--alias" => o.alias = Some(a.text(f, inline)?),
            "--chat-template" => {
                let v = a.value(f, inline)?;
                o.chat_template = Some(locus::model::chat::ChatFormat::from_name(&v).ok_or_else(
                    || {
                        CliError::Message(format!(
                            "{f}: unknown template {}; one of: {}",
                            super::quote(&v),
                            locus::model::chat::ChatFormat::NAMES.join(", ")
                        ))
                    },
                )?);
            }
            "-ctk" | "--cache-type-k" | "-ctv" | "--cache-type-v" => {
                set_kv(&mut kv, f, &a.value(f, inline)?)?
            }
            "--parse-special-in-messages" => o.parse_special_in_messages = true,
            "-v" | "--verbose" => o.verbose = true,
            "-n" | "--n-predict" | "--predict" => {
                let n: i64 = int(f, &a.value(f, inline)?, -1, i64::MAX)?;
                if n == 0 {
                    return err(format!(
                        "{f}: 0 tokens would generate nothing; -1 = no limit"
                    ));
                }
                o.llama.n_predict = usize::try_from(n).ok();
            }
            "--temp" | "--temperature" => {
                let t = super::real(f, &a.value(f, inline)?)?;
                if !(0.0..=100.0).contains(&t) {
                    return err(format!("{f}: the temperature must be from 0 to 100"));
                }
                o.llama.temp = Some(t);
            }
            "-s" | "--seed" => {
                let v = a.value(f, inline)?;
                o.llama.seed = match v.trim() {
                    "-1" => None,
                    v => Some(int(f, v, 0, u64::from(u32::MAX))?),
                };
            }
            // /metrics is always served (locus_ and llamacpp: names); the flag is llama-server's.
            "--metrics" => {}
            "--slots" => o.llama.no_slots = false,
            "--no-slots" => o.llama.no_slots = true,
            // locus writes the built-in chat formats only, as llama-server without --jinja.
            "--no-jinja" => {}
            "--jinja" => {
                return err(
                    "--jinja: locus has no Jinja template engine yet; it writes the model's chat \
                     format itself (pick one with --chat-template NAME)",
                )
            }
            "--slot-save-path" => {
                return err("--slot-save-path: saving and restoring slots is not served yet")
            }
            other => return Err(unknown("serve", other)),
        }
    }
    o.kv_type = kv.unwrap_or(KvType::F16);
    o.model = model.ok_or_else(|| CliError::Message("serve: -m FILE is required".into()))?;
    locus::serve::run(&o).map_err(locus::app::AppError::from)?;
    Ok(())
}
