//! `--pid-file FILE`: the serving process's PID, for scripts and init systems that signal it
//! (`kill -HUP $(cat FILE)`). Written when the process serves (after every listener is bound),
//! replaced in one rename so a reader never sees half of it. Through a binary upgrade the file
//! names the new process as soon as it serves; the old one leaves it alone when it exits, and
//! writes its own PID back if the upgrade failed. A process removes the file at exit only while
//! it still names that process.

use std::io;
use std::path::{Path, PathBuf};

/// The PID file this process wrote.
pub struct PidFile {
    path: PathBuf,
}

impl PidFile {
    /// Writes this process's PID to `path`.
    pub fn write(path: &Path) -> io::Result<PidFile> {
        let file = PidFile {
            path: path.to_path_buf(),
        };
        file.rewrite()?;
        Ok(file)
    }

    /// Writes this process's PID again (an upgrade that did not take over).
    pub fn rewrite(&self) -> io::Result<()> {
        let mut tmp = self.path.clone().into_os_string();
        tmp.push(".tmp");
        std::fs::write(&tmp, format!("{}\n", std::process::id()))?;
        std::fs::rename(&tmp, &self.path)
    }

    fn names_this_process(&self) -> bool {
        std::fs::read_to_string(&self.path).is_ok_and(|text| text.trim() == std::process::id().to_string())
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        if self.names_this_process() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}
