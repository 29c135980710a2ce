//! The Debian package (scripts/deb), installed for real: a Debian bookworm container with
//! systemd (common/container.rs) on a persistent overlay, so the install survives a reboot.
//! Boot 1 installs the .deb, enables the socket and the exporter, checks the man pages and
//! `systemd-analyze verify`; boot 2 checks what a boot does with it (slices before the
//! database, serve answering on the socket unit's address, the exporter), then purges and
//! compares the root's file list with the one before the install.
//!
//! The package: `$BULKHEAD_DEB` when set (a .deb built before, e.g. by CI's packaging step),
//! else `scripts/deb` builds it here (one release build, a few minutes on 2 cores).
//!
//! Also the example plan (dist/bulkhead.toml) and the generated completions and man pages,
//! on this machine.

use crate::common::container::{err, out, Container, PersistentRoot};
use bulkhead_testkit::assert_has;
use std::path::{Path, PathBuf};
use std::process::Command;

const EXAMPLE: &str = include_str!("../../../../dist/bulkhead.toml");
const REPO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
const UNITS: [&str; 6] = [
    "bulkhead-apply.service",
    "bulkhead-serve.socket",
    "bulkhead-serve.service",
    "bulkhead-guard.service",
    "bulkhead-exporter.service",
    "bulkhead-place.service",
];

/// The example plan with its commented socket section turned on.
fn example_with_socket() -> String {
    let mut text = String::new();
    let mut in_socket = false;
    for line in EXAMPLE.lines() {
        if line.starts_with("# [socket.") {
            in_socket = true;
        }
        if in_socket {
            text.push_str(
                line.strip_prefix("# ")
                    .unwrap_or(line.trim_start_matches('#')),
            );
        } else {
            text.push_str(line);
        }
        text.push('\n');
    }
    assert!(
        in_socket,
        "dist/bulkhead.toml has no commented [socket.NAME] example"
    );
    text
}

#[test]
fn example_plan_is_valid() {
    let Some((_suite, t, p)) = crate::suite::planned(EXAMPLE) else {
        return;
    };
    let o = t.ok(&["-c", p, "plan", "show"]);
    assert_has(&out(&o), "[slice.db-helper]");
    // What apply would do on this machine (cgroupfs under the test root): valid, no write.
    let o = t.run(&[
        "-c",
        p,
        "--backend",
        "cgroupfs",
        "apply",
        "--dry-run",
        "--strict",
    ]);
    let o = if o.status.success() {
        o
    } else {
        // --strict refuses directives this host cannot honour (IOWeight without BFQ, ...);
        // the plan itself must still be valid.
        t.run(&["-c", p, "--backend", "cgroupfs", "apply", "--dry-run"])
    };
    assert!(o.status.success(), "apply --dry-run: {}", err(&o));
    assert!(t.cgroups().is_empty(), "a dry run created cgroups");
    // The commented socket example, uncommented, is a socket serve takes.
    let plan = t.plan(&example_with_socket());
    let o = t.ok(&["-c", plan.to_str().unwrap(), "serve", "--dry-run"]);
    let text = format!("{}{}", out(&o), err(&o));
    assert!(text.contains("127.0.0.1:16379"), "{text}");
}

#[test]
fn completions_and_manpages_come_from_the_parser() {
    let _suite = crate::suite::shared();
    let bin = bulkhead_testkit::bins::this_build();
    for (shell, marker) in [
        ("bash", "complete -F _bulkhead"),
        ("zsh", "#compdef bulkhead"),
        ("fish", "complete -c bulkhead"),
        ("elvish", "edit:completion:arg-completer[bulkhead]"),
        ("powershell", "Register-ArgumentCompleter"),
    ] {
        let o = Command::new(&bin)
            .args(["completions", shell])
            .output()
            .unwrap();
        assert!(o.status.success(), "{shell}: {}", err(&o));
        let text = out(&o);
        assert!(text.contains(marker), "{shell}: no {marker}");
        assert!(
            text.contains("apply") && text.contains("dry-run"),
            "{shell}"
        );
    }
    let dir = std::env::temp_dir().join(format!("bulkhead-man-{}", std::process::id()));
    let o = Command::new(&bin)
        .args(["manpages", "--out"])
        .arg(&dir)
        .output()
        .unwrap();
    let _cleanup = RemoveDir(dir.clone());
    assert!(o.status.success(), "{}", err(&o));
    for page in [
        "bulkhead.8",
        "bulkhead-apply.8",
        "bulkhead-serve.8",
        "bulkhead-plan-show.8",
        "bulkhead-image-store-create.8",
        "bulkhead-completions.8",
    ] {
        let text =
            std::fs::read_to_string(dir.join(page)).unwrap_or_else(|e| panic!("{page}: {e}"));
        assert!(text.starts_with(".ie"), "{page} is not roff");
        assert!(text.contains(".TH"), "{page}");
    }
    // The hidden command has no page; the top page lists the commands.
    assert!(!dir.join("bulkhead-manpages.8").exists());
    let top = std::fs::read_to_string(dir.join("bulkhead.8")).unwrap();
    assert!(top.contains("bulkhead\\-apply(8)"), "{top}");
    // NAME says what it is once (not "bulkhead - bulkhead: ..."); pages have EXAMPLES.
    assert!(top.contains("bulkhead \\- Isolate the workloads"), "{top}");
    let apply = std::fs::read_to_string(dir.join("bulkhead-apply.8")).unwrap();
    assert!(apply.contains("bulkhead\\-apply \\- Create"), "{apply}");
    assert!(apply.contains(".SH EXAMPLES"), "{apply}");
    assert!(
        apply.contains("sudo bulkhead apply \\-\\-dry\\-run"),
        "{apply}"
    );
}

/// bash completion: no hidden commands, and `--slice` offers the plan's slices (by running
/// `bulkhead plan show --names` with the line's -c), not file names.
#[test]
fn bash_completes_slice_names_from_the_plan() {
    let _suite = crate::suite::shared();
    if !bulkhead_testkit::prereq::require(
        (!bulkhead_testkit::prereq::on_path("bash")).then_some("bash is not installed"),
    ) {
        return;
    }
    let bin = bulkhead_testkit::bins::this_build();
    let o = Command::new(&bin)
        .args(["completions", "bash"])
        .output()
        .unwrap();
    let script = out(&o);
    assert!(
        !script.contains("manpages"),
        "the hidden command is offered"
    );
    let dir = std::env::temp_dir().join(format!("bulkhead-comp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let _cleanup = RemoveDir(dir.clone());
    std::fs::write(dir.join("bulkhead.bash"), &script).unwrap();
    bulkhead_testkit::write(
        dir.join("plan.toml"),
        "[slice.web]\n[slice.web-cache]\nCPUWeight = 10\n",
    );
    let complete = |words: &str| -> String {
        let o = Command::new("bash")
            .arg("-c")
            .arg(format!(
                "source bulkhead.bash; COMP_WORDS=({words}); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); \
                 _bulkhead bulkhead \"${{COMP_WORDS[COMP_CWORD]}}\" \"${{COMP_WORDS[COMP_CWORD-1]}}\" 2>/dev/null; \
                 echo \"${{COMPREPLY[@]}}\""
            ))
            .current_dir(&dir)
            .env("PATH", format!("{}:/usr/bin:/bin", bin.parent().unwrap().display()))
            .env_remove("BULKHEAD_CONFIG")
            .output()
            .unwrap();
        out(&o).trim().to_string()
    };
    assert_eq!(
        complete("bulkhead -c plan.toml run --slice we"),
        "web web-cache"
    );
    assert_eq!(complete("bulkhead -c plan.toml move -s web-"), "web-cache");
    let top = complete("bulkhead ma");
    assert!(!top.contains("manpages"), "{top}");
}

struct RemoveDir(PathBuf);
impl Drop for RemoveDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The .deb: $BULKHEAD_DEB, or built now by scripts/deb into this build's target dir.
fn package() -> PathBuf {
    if let Some(p) = std::env::var_os("BULKHEAD_DEB") {
        let p = PathBuf::from(p);
        assert!(p.is_file(), "BULKHEAD_DEB={} is not a file", p.display());
        return p;
    }
    // The target dir is the one this test's bulkhead was built in (<target>/debug/bulkhead).
    let built = bulkhead_testkit::bins::this_build();
    let target = built.parent().and_then(Path::parent).unwrap();
    let start = std::time::Instant::now();
    eprintln!("package: scripts/deb (a release build; BULKHEAD_DEB=FILE skips it)");
    let o = Command::new(Path::new(REPO).join("scripts/deb"))
        .env("CARGO_TARGET_DIR", target)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .output()
        .expect("run scripts/deb");
    assert!(o.status.success(), "scripts/deb failed");
    let deb = PathBuf::from(out(&o).lines().last().unwrap_or_default().trim());
    eprintln!(
        "package: {} built in {:.0?}",
        deb.display(),
        start.elapsed()
    );
    assert!(deb.is_file(), "scripts/deb printed {}", deb.display());
    deb
}

/// lintian finds no error (warnings and infos are printed; README "Install" lists them).
fn lintian(deb: &Path) {
    if !Path::new("/usr/bin/lintian").exists() {
        bulkhead_testkit::prereq::missing(
            "lintian is not installed, the package is not linted (scripts/setup installs it)",
        );
        return;
    }
    let o = Command::new("lintian")
        .args([
            "--fail-on",
            "error",
            "-I",
            "--pedantic",
            "--tag-display-limit",
            "0",
        ])
        .arg(deb)
        .output()
        .unwrap();
    eprintln!("package: lintian:\n{}{}", out(&o), err(&o));
    assert!(o.status.success(), "lintian found errors");
}

/// Every path of the container's root, without what a boot, dpkg and man-db change anyway.
fn listing(c: &Container) -> Vec<String> {
    let o = c.sh(
        "find / -xdev \\( -path /proc -o -path /sys -o -path /dev -o -path /run -o -path /tmp \
         -o -path /var/tmp -o -path /var/lib/dpkg -o -path /var/log -o -path /var/cache/man \
         -o -path /var/lib/systemd \\) -prune -o -print | sort",
    );
    assert!(o.status.success(), "find: {}", err(&o));
    out(&o).lines().map(str::to_string).collect()
}

fn ok(c: &Container, what: &str, script: &str) -> String {
    let o = c.sh(script);
    check(what, script, o)
}

/// The same in bash (for /dev/tcp: the root has no nc or python).
fn bash(c: &Container, what: &str, script: &str) -> String {
    let o = c
        .cmd(&["bash", "-c", script])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    check(what, script, o)
}

fn check(what: &str, script: &str, o: std::process::Output) -> String {
    assert!(
        o.status.success(),
        "{what}: `{script}` failed ({}):\n{}{}",
        o.status,
        out(&o),
        err(&o)
    );
    out(&o)
}

/// A line to a TCP port inside the container, and the answer.
fn talk(c: &Container, port: u16, line: &str) -> String {
    bash(
        c,
        "talk",
        &format!(
            "exec 3<>/dev/tcp/127.0.0.1/{port} && printf '%s\\n' '{line}' >&3 && timeout 20 cat <&3",
        ),
    )
    .trim()
    .to_string()
}

#[test]
fn package_installs_boots_serves_and_purges() {
    let _suite = crate::suite::shared();
    let Some(root) = PersistentRoot::new() else {
        return;
    };
    let deb = package();
    lintian(&deb);
    let port: u16 = 17379;
    // The admin's plan: the example, plus a socket whose target is a shell (the root has
    // no python or busybox), one per connection, on a port the socket unit's drop-in sets.
    let plan = format!(
        "{EXAMPLE}\n[socket.echo]\nlisten = [\"127.0.0.1:{port}\"]\nmode = \"per-connection\"\n\
         [socket.echo.target]\ncommand = [\"/bin/sh\", \"-c\", \"read line; echo \\\"pong $line\\\"\"]\n\
         slice = \"db-helper\"\n"
    );

    let before = first_boot_installs(&root, &deb, &plan, port);
    let c = Container::boot_from(&root);
    boot_applies_and_exports(&c);
    serve_is_socket_activated(&c, port);
    upgrade_keeps_what_the_admin_enabled(&c, &deb, port);
    purge_leaves_nothing(&c, &before);
}

/// Boot 1: install. apply is enabled and runs, the other units are installed disabled, every
/// unit verifies, man pages and completions are in place; then the admin's part (the plan, a
/// socket drop-in, two units enabled). Returns the root's listing before the install.
fn first_boot_installs(root: &PersistentRoot, deb: &Path, plan: &str, port: u16) -> Vec<String> {
    let c = Container::boot_from(root);
    let before = listing(&c);
    std::fs::copy(deb, c.path("/tmp/bulkhead.deb")).unwrap();
    let o = ok(&c, "dpkg -i", "dpkg -i /tmp/bulkhead.deb 2>&1");
    eprintln!("package: {}", o.lines().last().unwrap_or_default());
    ok(&c, "rm", "rm /tmp/bulkhead.deb");
    // apply is enabled and ran; the others are installed, disabled.
    assert_eq!(c.show("bulkhead-apply.service", "UnitFileState"), "enabled");
    assert_eq!(c.show("bulkhead-apply.service", "ActiveState"), "active");
    for u in &UNITS[1..] {
        // serve.service has no [Install] of its own, only Also=bulkhead-serve.socket.
        let state = c.show(u, "UnitFileState");
        assert!(state == "disabled" || state == "indirect", "{u}: {state}");
    }
    assert_eq!(c.show("db-helper.slice", "ActiveState"), "active");
    assert_eq!(
        ok(&c, "conffiles", "dpkg-query -W -f='${Conffiles}' bulkhead")
            .split_whitespace()
            .next(),
        Some("/etc/bulkhead/bulkhead.toml")
    );
    // Every shipped unit passes systemd-analyze verify.
    let files: Vec<String> = UNITS
        .iter()
        .map(|u| format!("/usr/lib/systemd/system/{u}"))
        .collect();
    let o = c.sh(&format!("systemd-analyze verify {} 2>&1", files.join(" ")));
    assert!(
        o.status.success() && out(&o).trim().is_empty(),
        "systemd-analyze verify:\n{}",
        out(&o)
    );
    // Man pages render (man-db + groff), completions are where the shells look.
    let page = ok(&c, "man", "MANWIDTH=80 man bulkhead 2>&1");
    assert!(
        page.contains("NAME") && page.contains("bulkhead-apply(8)"),
        "{page}"
    );
    // (groff justifies lines: compare with single spaces)
    let page = ok(&c, "man", "MANWIDTH=80 man 8 bulkhead-serve 2>&1");
    let page = page.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(page.contains("Plan keys of [socket.NAME]"), "{page}");
    ok(
        &c,
        "completions",
        "test -s /usr/share/bash-completion/completions/bulkhead && \
         test -s /usr/share/zsh/vendor-completions/_bulkhead && \
         test -s /usr/share/fish/vendor_completions.d/bulkhead.fish",
    );
    // The admin's part: the plan, the socket's address (a drop-in), enable two units.
    c.write("/etc/bulkhead/bulkhead.toml", plan);
    ok(
        &c,
        "drop-in",
        "mkdir -p /etc/systemd/system/bulkhead-serve.socket.d",
    );
    c.write(
        "/etc/systemd/system/bulkhead-serve.socket.d/port.conf",
        &format!("[Socket]\nListenStream=\nListenStream=127.0.0.1:{port}\n"),
    );
    ok(
        &c,
        "enable",
        "systemctl daemon-reload && systemctl enable bulkhead-serve.socket bulkhead-exporter.service 2>&1",
    );
    before
}

/// Boot 2: what a boot does with the package: the slices, ordered before the databases, and
/// the exporter locked down, bounded and serving.
fn boot_applies_and_exports(c: &Container) {
    assert_eq!(c.show("bulkhead-apply.service", "ActiveState"), "active");
    assert_eq!(c.show("bulkhead-apply.service", "Result"), "success");
    for s in ["db.slice", "db-server.slice", "db-helper.slice"] {
        assert_eq!(c.show(s, "ActiveState"), "active", "{s} after the boot");
    }
    assert_eq!(c.show("db-server.slice", "CPUWeight"), "1000");
    // Ordered before the database units (and bulkhead's own).
    let before_units = c.show("bulkhead-apply.service", "Before");
    for u in [
        "postgresql.service",
        "mariadb.service",
        "redis-server.service",
        "bulkhead-serve.service",
    ] {
        assert!(
            before_units.contains(u),
            "Before= lacks {u}: {before_units}"
        );
    }
    // The exporter, locked down and bounded, still reads the slices.
    assert_eq!(c.show("bulkhead-exporter.service", "ActiveState"), "active");
    for (property, want) in [
        ("CPUQuotaPerSecUSec", "200ms"),
        ("CPUWeight", "20"),
        ("MemoryMax", "67108864"),
        ("TasksMax", "16"),
        ("LimitNOFILE", "1024"),
    ] {
        assert_eq!(
            c.show("bulkhead-exporter.service", property),
            want,
            "{property}"
        );
    }
    let metrics = bash(
        c,
        "metrics",
        "exec 3<>/dev/tcp/127.0.0.1/9649 && printf 'GET /metrics HTTP/1.0\\r\\n\\r\\n' >&3 && timeout 20 cat <&3",
    );
    assert!(
        metrics.contains("200") && metrics.contains("db-helper"),
        "{metrics}"
    );
    let failed = ok(
        c,
        "failed",
        "systemctl list-units --failed --plain --no-legend 'bulkhead*'",
    );
    assert!(failed.trim().is_empty(), "failed units: {failed}");
}

/// serve, socket-activated: its unit is started with the socket systemd holds.
fn serve_is_socket_activated(c: &Container, port: u16) {
    assert_eq!(c.show("bulkhead-serve.socket", "ActiveState"), "active");
    assert_eq!(c.show("bulkhead-serve.service", "ActiveState"), "inactive");
    let answer = c
        .cmd(&[
            "bash",
            "-c",
            &format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo one >&3 && timeout 20 cat <&3"),
        ])
        .output()
        .unwrap();
    let log = out(
        &c.sh("journalctl -b -u bulkhead-serve.service -u bulkhead-serve.socket --no-pager 2>&1")
    );
    assert_eq!(
        out(&answer).trim(),
        "pong one",
        "{}\nserve's log:\n{log}",
        err(&answer)
    );
    assert_eq!(c.show("bulkhead-serve.service", "ActiveState"), "active");
    assert_eq!(talk(c, port, "two"), "pong two");
    let log = ok(
        c,
        "journal",
        "journalctl -b -u bulkhead-serve.service --no-pager 2>&1",
    );
    eprintln!("package: serve's log:\n{log}");
    assert!(
        log.contains(&format!(
            "listening on 127.0.0.1:{port} (from the socket unit)"
        )),
        "serve bound the port itself instead of taking the socket unit's:\n{log}"
    );
}

/// An upgrade (the same version again): the plan is applied again, serve restarted, and
/// nothing the admin enabled is lost.
fn upgrade_keeps_what_the_admin_enabled(c: &Container, deb: &Path, port: u16) {
    std::fs::copy(deb, c.path("/tmp/bulkhead.deb")).unwrap();
    ok(
        c,
        "dpkg -i again",
        "dpkg -i /tmp/bulkhead.deb 2>&1 && rm /tmp/bulkhead.deb",
    );
    assert_eq!(c.show("bulkhead-apply.service", "ActiveState"), "active");
    assert_eq!(c.show("bulkhead-serve.socket", "UnitFileState"), "enabled");
    assert_eq!(talk(c, port, "three"), "pong three");
    assert_eq!(c.show("bulkhead-exporter.service", "ActiveState"), "active");
}

/// Purge: the admin's drop-in is theirs to remove; everything else goes with the package.
fn purge_leaves_nothing(c: &Container, before: &[String]) {
    ok(
        c,
        "rm drop-in",
        "rm -r /etc/systemd/system/bulkhead-serve.socket.d",
    );
    ok(c, "purge", "dpkg --purge bulkhead 2>&1");
    for u in UNITS {
        assert_ne!(c.show(u, "ActiveState"), "active", "{u} still runs");
    }
    let after = listing(c);
    assert!(
        before.len() > 1000,
        "find listed only {} paths",
        before.len()
    );
    let added: Vec<_> = after.iter().filter(|p| !before.contains(p)).collect();
    let removed: Vec<_> = before.iter().filter(|p| !after.contains(p)).collect();
    assert!(
        added.is_empty() && removed.is_empty(),
        "the purge left {added:?}, removed {removed:?}"
    );
    let left = ok(
        c,
        "leftovers",
        "ls -d /run/bulkhead /etc/bulkhead /var/lib/systemd/deb-systemd-helper-*/*bulkhead* \
         /etc/systemd/system/*/bulkhead-* /etc/systemd/system/bulkhead-* 2>/dev/null; true",
    );
    assert!(left.trim().is_empty(), "left after purge: {left}");
}
