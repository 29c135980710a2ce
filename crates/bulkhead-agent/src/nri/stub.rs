//! The NRI plugin's process: start `bulkhead-nri-stub` (the NRI project's Go stub, which
//! holds the connection to the runtime) with pipes, and answer its requests one JSON line at
//! a time until it ends: each request line gets exactly one answer line. Lines are bounded;
//! the files written after creation are kept for at most `MAX_PENDING` containers, each until
//! its StartContainer, its RemoveContainer (the stub's `remove`) or `MAX_AGE` (a container
//! created and never started nor removed). What each pod got, and what it did not, is logged
//! and reported on the pod (`events`).

use super::events::{Events, PodEvent};
use super::{cgroup_dir, Answer, Decision, OnRefused, Policy, Request, Write};
use crate::logging::log;
use bulkhead::actions::container;
use bulkhead::actions::host::{hierarchy_of, write_control, Host};
use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Read, Write as _};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The longest request line read (pod annotations are at most 256 KiB in Kubernetes).
const MAX_LINE: u64 = 1 << 20;
/// Containers whose files wait for their StartContainer.
const MAX_PENDING: usize = 4096;
/// A container created this long ago and neither started nor removed is forgotten (the
/// kubelet starts a container right after creating it).
const MAX_AGE: Duration = Duration::from_secs(600);
/// At most this many forgotten per creation (bounded work per request).
const EXPIRE_PER_INSERT: usize = 64;

/// The files of containers created and not started yet, by the container's ID, oldest first
/// (`by_age`, by insertion number): both maps hold the same entries.
#[derive(Default)]
pub(crate) struct Pending {
    by_id: HashMap<String, (u64, Vec<Write>)>,
    by_age: BTreeMap<u64, (Instant, String)>,
    next: u64,
}

impl Pending {
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Forget the entries older than `MAX_AGE` at `now`, at most `EXPIRE_PER_INSERT`; their
    /// IDs.
    fn expire(&mut self, now: Instant) -> Vec<String> {
        let mut gone = Vec::new();
        while gone.len() < EXPIRE_PER_INSERT {
            let Some(entry) = self.by_age.first_entry() else {
                break;
            };
            if now.saturating_duration_since(entry.get().0) < MAX_AGE {
                break;
            }
            let (_, id) = entry.remove();
            self.by_id.remove(&id);
            gone.push(id);
        }
        gone
    }

    /// Keep `writes` for container `id` (a second creation of one ID replaces the first);
    /// false when `MAX_PENDING` are waiting.
    fn insert(&mut self, id: &str, writes: Vec<Write>, now: Instant) -> bool {
        self.take(id);
        if self.by_id.len() >= MAX_PENDING {
            return false;
        }
        let n = self.next;
        self.next += 1;
        self.by_age.insert(n, (now, id.to_string()));
        self.by_id.insert(id.to_string(), (n, writes));
        true
    }

    /// The files of container `id`, forgotten here.
    fn take(&mut self, id: &str) -> Option<Vec<Write>> {
        let (n, writes) = self.by_id.remove(id)?;
        self.by_age.remove(&n);
        Some(writes)
    }
}

pub struct Options {
    pub stub: PathBuf,
    pub socket: PathBuf,
    pub name: String,
    pub index: String,
    pub policy: Policy,
    /// Serve /healthz and /readyz here; ready once the runtime has synchronized with the
    /// plugin (it accepted the registration).
    pub health: Option<SocketAddr>,
}

/// The stub's request: a container being created (`create`), about to start (`start`:
/// created by the runtime, its cgroup exists) or removed (`remove`: one the plugin asked to
/// see at its start, removed before it, or after); or `synchronized`: the runtime accepted
/// the plugin's registration (sent again after a reconnect).
#[derive(serde::Deserialize)]
pub(crate) struct Envelope {
    #[serde(default)]
    event: String,
    #[serde(default)]
    id: String,
    #[serde(default, rename = "cgroupsPath")]
    cgroups_path: String,
    #[serde(flatten)]
    request: Request,
}

/// SIGINT and SIGTERM (the same numbers on every Linux architecture).
const STOP_SIGNALS: [i32; 2] = [2, 15];

pub fn serve(o: Options) -> Result<(), String> {
    o.policy.validate()?;
    // SIGTERM ends the plugin at once, also as PID 1 of its container (which ignores signals
    // it has no handler for); the stub sees its parent gone and ends within a second.
    let sigs = bulkhead::sys::signals::SignalPipe::install(&STOP_SIGNALS)
        .map_err(|e| format!("cannot catch SIGTERM: {e}"))?;
    let reader = sigs.reader().map_err(|e| e.to_string())?;
    std::thread::spawn(move || {
        if let Some(sig) = reader.recv() {
            log(format!("nri: signal {sig}: stopping"));
            std::process::exit(0);
        }
    });
    let node = container::node().map_err(|e| crate::machine::error_text(&e))?;
    let host = Host::detect();
    let ready = Arc::new(AtomicBool::new(false));
    if let Some(addr) = o.health {
        serve_health(addr, ready.clone())?;
    }
    let events = Events::start(&o.name, std::env::var("NODE_NAME").ok());
    let mut child = Command::new(&o.stub)
        .arg("-socket")
        .arg(&o.socket)
        .args(["-name", &o.name, "-idx", &o.index])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", o.stub.display()))?;
    log(format!(
        "nri: plugin {}-{} on {} (cgroup {} node; on refused: {:?}; namespaces: {}; allowed directives: {}; slices: {})",
        o.index,
        o.name,
        o.socket.display(),
        if node.is_v2() { "v2" } else { "v1" },
        o.policy.on_refused,
        o.policy.namespaces_text(),
        super::list(&o.policy.allow),
        super::list(&o.policy.slices),
    ));
    if o.policy.namespaces.is_empty() {
        log("nri: no namespace is listed (--namespace): every pod's bulkhead.io annotations are refused");
    }
    let (Some(mut to_stub), Some(from_stub)) = (child.stdin.take(), child.stdout.take()) else {
        return Err("the stub's pipes are missing".into());
    };
    let mut lines = BufReader::new(from_stub);
    let mut pending = Pending::default();
    loop {
        let mut line = String::new();
        let n = (&mut lines)
            .take(MAX_LINE)
            .read_line(&mut line)
            .map_err(|e| format!("reading the stub: {e}"))?;
        if n == 0 {
            let st = child.wait().map_err(|e| e.to_string())?;
            return Err(format!("bulkhead-nri-stub ended ({st})"));
        }
        if !line.ends_with('\n') {
            let _ = child.kill();
            return Err(format!(
                "a request longer than {MAX_LINE} bytes from the stub"
            ));
        }
        let answer = match serde_json::from_str::<Envelope>(&line) {
            Ok(env) if env.event == "synchronized" => {
                if !ready.swap(true, Ordering::Relaxed) {
                    log("nri: the runtime accepted the plugin (synchronized): ready");
                }
                serde_json::json!({ "seq": env.request.seq })
            }
            Ok(env) => handle(&o.policy, &events, env, &mut pending, Instant::now(), |r| {
                // The node is read at each creation: a disk switched to BFQ, or io.cost the
                // agent's plan enabled, counts from the next container on.
                container::node()
                    .map_err(|e| crate::machine::error_text(&e))
                    .and_then(|node| o.policy.decide(&r.namespace, &r.annotations, &node, &host))
            }),
            Err(e) => {
                let _ = child.kill();
                return Err(format!("a request the stub should not send: {e}"));
            }
        };
        let mut text = serde_json::to_string(&answer).map_err(|e| e.to_string())?;
        text.push('\n');
        to_stub
            .write_all(text.as_bytes())
            .map_err(|e| format!("writing to the stub: {e}"))?;
    }
}

/// /healthz and /readyz on `addr` (bound here, so a taken port fails the start), answered
/// by a thread of their own: ready once the runtime synchronized with the plugin.
fn serve_health(addr: SocketAddr, ready: Arc<AtomicBool>) -> Result<(), String> {
    let listener = std::net::TcpListener::bind(addr)
        .and_then(|l| l.set_nonblocking(true).map(|_| l))
        .map_err(|e| format!("--health-listen {addr}: {e}"))?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("--health-listen: {e}"))?;
    std::thread::spawn(move || {
        rt.block_on(async move {
            match tokio::net::TcpListener::from_std(listener) {
                Ok(l) => crate::health::serve(l, ready).await,
                Err(e) => log(format!("nri: --health-listen {addr}: {e}")),
            }
        })
    });
    log(format!("nri: health on http://{addr}/healthz and /readyz"));
    Ok(())
}

/// One request's answer (exactly one per request). `decide` is the policy's decision for a
/// container being created (`Policy::decide` on this node), `now` the time of the request.
pub(crate) fn handle(
    policy: &Policy,
    events: &Events,
    env: Envelope,
    pending: &mut Pending,
    now: Instant,
    decide: impl FnOnce(&Request) -> Result<Decision, String>,
) -> serde_json::Value {
    let r = &env.request;
    let who = format!("pod {}/{} container {}", r.namespace, r.pod, r.container);
    let event = |warning: bool, reason: &'static str, note: String| {
        events.send(PodEvent {
            namespace: r.namespace.clone(),
            pod: r.pod.clone(),
            uid: r.uid.clone(),
            warning,
            reason,
            note: format!("container {}: {note}", r.container),
        })
    };
    let mut answer = Answer {
        seq: r.seq,
        error: None,
        adjust: None,
    };
    let mut post = false;
    match env.event.as_str() {
        "create" => match decide(r) {
            Ok(d) => {
                for n in &d.notes {
                    log(format!("nri: {who}: {n}"));
                }
                for n in &d.unapplied {
                    log(format!("nri: {who}: {n}"));
                }
                let applied = applied_text(&d.adjust, &d.writes);
                log(format!("nri: {who}: {applied}"));
                if !d.unapplied.is_empty() {
                    event(true, "BulkheadNotApplied", d.unapplied.join("; "));
                }
                if !applied.is_empty() {
                    let mut note = applied;
                    for n in &d.notes {
                        note = format!("{note}; {n}");
                    }
                    event(false, "BulkheadApplied", note);
                }
                let wants_post = !d.writes.is_empty();
                if wants_post {
                    let gone = pending.expire(now);
                    if !gone.is_empty() {
                        log(format!(
                            "nri: forgot {} containers created more than {} s ago and neither started nor removed ({}{})",
                            gone.len(),
                            MAX_AGE.as_secs(),
                            gone[..gone.len().min(3)].join(", "),
                            if gone.len() > 3 { ", ..." } else { "" }
                        ));
                    }
                    post = pending.insert(&env.id, d.writes, now);
                }
                if post || !wants_post {
                    answer.adjust = Some(d.adjust);
                } else {
                    let e = format!(
                        "{MAX_PENDING} containers are waiting for their start: the files written after creation are not applied"
                    );
                    if policy.on_refused == OnRefused::Fail {
                        log(format!("nri: {who}: {e}"));
                        answer.error = Some(format!("bulkhead: {e}"));
                    } else {
                        log(format!(
                            "nri: {who}: {e}; the container starts without them"
                        ));
                        event(true, "BulkheadNotApplied", e);
                        answer.adjust = Some(d.adjust);
                    }
                }
            }
            Err(e) if policy.on_refused == OnRefused::Fail => {
                log(format!("nri: {who}: {e}"));
                answer.error = Some(format!("bulkhead: {e}"));
            }
            Err(e) => {
                log(format!("nri: {who}: {e}; nothing applied"));
                event(true, "BulkheadRefused", format!("{e}; nothing applied"));
            }
        },
        "start" => {
            // The stub asks only for containers whose creation was answered `post`: one not
            // held any more was forgotten (MAX_AGE).
            let written = match pending.take(&env.id) {
                Some(writes) => write_all(&env.cgroups_path, &writes),
                None => Err(format!(
                    "the files to write at its start were forgotten (created more than {} s before it started)",
                    MAX_AGE.as_secs()
                )),
            };
            match written {
                Ok(()) => log(format!("nri: {who}: written in {}", env.cgroups_path)),
                Err(e) if policy.on_refused == OnRefused::Fail => {
                    log(format!("nri: {who}: {e}"));
                    answer.error = Some(format!("bulkhead: {e}"));
                }
                Err(e) => {
                    log(format!("nri: {who}: {e}; the container starts without it"));
                    event(true, "BulkheadNotApplied", e);
                }
            }
        }
        // Removed before its start (or after): its files go. Always answered, with nothing.
        "remove" => {
            if pending.take(&env.id).is_some() {
                log(format!(
                    "nri: {who}: removed before its start; its files are forgotten"
                ));
            }
        }
        other => answer.error = Some(format!("bulkhead: unknown event {other:?}")),
    }
    let mut v = serde_json::to_value(&answer).unwrap_or_default();
    if post {
        v["post"] = true.into();
    }
    v
}

/// What a container gets, in one line: its OCI fields, then the files written after
/// creation (`pod ` before those of the pod's own cgroup).
fn applied_text(adjust: &super::Adjust, writes: &[Write]) -> String {
    let oci = serde_json::to_value(adjust).unwrap_or_default();
    let mut parts: Vec<String> = Vec::new();
    if let Some(m) = oci.as_object() {
        for (k, v) in m {
            match v.as_object() {
                Some(u) => parts.extend(u.iter().map(|(f, x)| format!("{f}={}", plain(x)))),
                None => parts.push(format!("{k}={}", plain(v))),
            }
        }
    }
    parts.extend(writes.iter().map(|w| {
        format!(
            "{}{}={} (after creation)",
            if w.pod { "pod " } else { "" },
            w.file,
            w.value
        )
    }));
    parts.join(" ")
}

fn plain(v: &serde_json::Value) -> String {
    v.as_str().map_or_else(|| v.to_string(), str::to_string)
}

/// Write the files into the container's cgroup or its pod's (its parent), in the hierarchy of
/// each one's controller.
fn write_all(cgroups_path: &str, writes: &[Write]) -> Result<(), String> {
    let rel = cgroup_dir(cgroups_path)
        .ok_or_else(|| format!("the runtime's cgroups path {cgroups_path:?} is not one I read"))?;
    let pod = rel.parent().filter(|p| !p.as_os_str().is_empty());
    for w in writes {
        let mount = hierarchy_of(&w.controller)?;
        let dir = match (w.pod, pod) {
            (false, _) => rel.as_path(),
            (true, Some(p)) => p,
            (true, None) => return Err(format!("{cgroups_path:?} has no pod cgroup above it")),
        };
        let path = mount.join(dir).join(&w.file);
        write_control(&path, &w.value)
            .map_err(|e| format!("write {} = {}: {e}", path.display(), w.value))?;
    }
    Ok(())
}
