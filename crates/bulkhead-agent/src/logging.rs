//! One log line on stderr, with the time: what the agent did or could not do.

pub fn log(msg: impl AsRef<str>) {
    let t = k8s_openapi::jiff::Timestamp::now();
    eprintln!("{t} bulkhead-agent: {}", msg.as_ref());
}
