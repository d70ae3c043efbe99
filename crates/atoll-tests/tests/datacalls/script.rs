//! The bash that runs `sizes.py` by phases, for the data-call tests of a
//! local copy island (`datacalls.rs`) and of a remote host
//! (`hosts/datacalls.rs`).

/// Bash that writes the script into `$ROOT` and runs each phase.
pub fn script(phases: &[&str]) -> String {
    let mut s = format!(
        "cd \"$ROOT\" && cat > sizes.py <<'PY'\n{}PY\n",
        include_str!("sizes.py")
    );
    for p in phases {
        s.push_str(&format!("python3 sizes.py {p} || exit 1\n"));
    }
    s
}
