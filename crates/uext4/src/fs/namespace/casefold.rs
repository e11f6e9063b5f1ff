//! Turning case-insensitive name lookup on or off for one directory (the
//! casefold inode flag, as `chattr +F` sets it through FS_IOC_SETFLAGS).

use super::ftype;
use crate::dir::write as dw;
use crate::error::{Error, Result};
use crate::format::features::incompat;
use crate::format::inode::{FileType, Timestamp, FL_CASEFOLD, FL_ENCRYPT};
use crate::fs::{FsCore, Stat};

impl FsCore {
    /// Sets (`on`) or clears the casefold flag of directory `ino`, with the
    /// kernel's rules: the filesystem must have the casefold feature
    /// (EOPNOTSUPP), `ino` must be a directory (ENOTDIR) holding nothing but
    /// "." and ".." (ENOTEMPTY), since its entries are hashed and found by
    /// the form the flag selects. Subdirectories created later inherit the
    /// flag. Encrypted directories are refused.
    pub fn set_casefold(&self, ino: u32, on: bool) -> Result<Stat> {
        if !self.vol.sb.features.has_incompat(incompat::CASEFOLD) {
            return Err(Error::Unsupported("the casefold flag needs the casefold feature".into()));
        }
        let rw = self.rw()?;
        let _l = rw.data.locks().lock_exclusive(&[ino], &[]);
        let mut d = self.load(ino)?;
        self.check_live(&d)?;
        if ftype(&d)? != FileType::Directory {
            return Err(Error::NotDir(format!("inode {ino}")));
        }
        if (d.flags & FL_CASEFOLD != 0) == on {
            return self.stat(ino);
        }
        if d.flags & FL_ENCRYPT != 0 {
            return Err(Error::Unsupported("casefolding an encrypted directory".into()));
        }
        if !dw::is_empty(&self.vol, &d)? {
            return Err(Error::NotEmpty(format!("inode {ino}")));
        }
        let tx = self.begin(4)?;
        if on {
            d.flags |= FL_CASEFOLD;
        } else {
            d.flags &= !FL_CASEFOLD;
        }
        d.ctime = Timestamp::now();
        tx.write_inode(&mut d)?;
        self.note_tid(&tx, &[ino]);
        drop(tx);
        self.stat(ino)
    }
}
