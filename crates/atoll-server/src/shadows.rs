//! Where dnotify shadows live (`fs/inotify/dnotify.rs`, client
//! `dnotify.rs`): `<runtime>/dnotify`, which clients name beside the boot
//! socket. The file servers make, rename and remove entries there at
//! every change of a registered directory, and a registration's end
//! removes its shadow: on a disk file system (the runtime directory is
//! under `/tmp` without `$XDG_RUNTIME_DIR`) a directory's removal alone
//! can take milliseconds (measured: 2 ms per `rmdir` on an ext4 mounted
//! with `discard`), which a server would spend inside a client's `close`.
//! So when `/dev/shm` is there, `<runtime>/dnotify` is a symbolic link to
//! a directory of the instance's own on it (mode 0700, made anew: one
//! that exists already is not taken), removed with the runtime directory.

use std::path::{Path, PathBuf};

/// The link's name in the runtime directory.
const LINK: &str = "dnotify";

/// The tmpfs directory for instance `id`.
fn target(id: &str) -> PathBuf {
    PathBuf::from(format!("/dev/shm/atoll-dnotify-{id}"))
}

/// Make `<runtime_dir>/dnotify` a link to a new tmpfs directory, if one
/// can be made; otherwise clients make a plain directory there.
pub fn prepare(runtime_dir: &Path, id: &str) {
    use std::os::unix::fs::DirBuilderExt;
    let t = target(id);
    if std::fs::DirBuilder::new().mode(0o700).create(&t).is_err() {
        return;
    }
    if std::os::unix::fs::symlink(&t, runtime_dir.join(LINK)).is_err() {
        let _ = std::fs::remove_dir(&t);
    }
}

/// Remove the runtime directory, and the tmpfs directory its link names
/// if it is this instance's.
pub fn remove_runtime_dir(runtime_dir: &Path) {
    if let Ok(t) = std::fs::read_link(runtime_dir.join(LINK)) {
        let id = runtime_dir.file_name().and_then(|n| n.to_str());
        if id.is_some_and(|id| t == target(id)) {
            let _ = std::fs::remove_dir_all(&t);
        }
    }
    let _ = std::fs::remove_dir_all(runtime_dir);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_link_goes_with_the_runtime_directory() {
        let root = tempfile::tempdir().unwrap();
        let id = format!("t{}", std::process::id());
        let rt = root.path().join(&id);
        std::fs::create_dir(&rt).unwrap();
        prepare(&rt, &id);
        if !Path::new("/dev/shm").is_dir() {
            return;
        }
        assert_eq!(std::fs::read_link(rt.join(LINK)).unwrap(), target(&id));
        std::fs::create_dir(rt.join(LINK).join("q")).unwrap();
        assert!(target(&id).join("q").is_dir());
        // A second instance with the same name takes nothing of it.
        let other = root.path().join("other");
        std::fs::create_dir(&other).unwrap();
        prepare(&other, &id);
        assert!(std::fs::read_link(other.join(LINK)).is_err());
        remove_runtime_dir(&rt);
        assert!(!rt.exists());
        assert!(!target(&id).exists());
    }
}
