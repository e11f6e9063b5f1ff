//! Quota and project-id operations of the library: reading usage and
//! limits, setting limits, getting and setting a file's project id and
//! its project-inheritance flag (what FS_IOC_FSGETXATTR and
//! FS_IOC_FSSETXATTR carry), and the quota check of buffered writes.
//!
//! The account itself is kept by [`crate::quota`] where inode records
//! change; this file is the front ends' door to it.

use super::FsCore;
use crate::error::{Error, Result};
use crate::format::features::ro_compat;
use crate::format::inode::{Inode, Timestamp, FL_PROJINHERIT, GOOD_OLD_INODE_SIZE};
use crate::format::quota::QuotaType;
use crate::quota::{QuotaEntry, QuotaLimits, Quotas};

/// Journal credits of a limit change or a project change (the inode and
/// the entries are counted in [`crate::quota::QUOTA_CREDITS`]).
const QUOTA_OP_CREDITS: usize = 4;

/// A file's project and inheritance flag (the project fields of
/// `struct fsxattr`), read and set with
/// [`FsCore::project`](crate::FsCore::project) and
/// [`FsCore::set_project`](crate::FsCore::set_project) (FS_IOC_FSGETXATTR,
/// FS_IOC_FSSETXATTR, `chattr -p`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProjectAttr {
    /// The project id (`fsx_projid`).
    pub projid: u32,
    /// New files in this directory take its project (`FS_XFLAG_PROJINHERIT`).
    pub inherit: bool,
}

/// Refuses (EXDEV) a new name for inode `i` in directory `dir` when
/// `dir` keeps its tree in a project `i` is not in (the kernel's
/// ext4_link and ext4_rename: such a move would escape the project's
/// quota; user space copies instead).
pub(crate) fn check_project_link(dir: &Inode, i: &Inode) -> Result<()> {
    if dir.flags & FL_PROJINHERIT != 0 && dir.projid != i.projid {
        return Err(Error::CrossDevice(format!(
            "inode {} (project {}) into directory {} of project {}",
            i.ino, i.projid, dir.ino, dir.projid
        )));
    }
    Ok(())
}

impl FsCore {
    /// Runs `f` on the filesystem's quotas: the live ones when open
    /// read-write, else loaded from the image now.
    fn with_quotas<R>(&self, f: impl FnOnce(&Quotas) -> R) -> Result<R> {
        if let Some(q) = self.live().and_then(|rw| rw.quota.as_ref()) {
            return Ok(f(q));
        }
        let q =
            Quotas::load(&self.vol)?.ok_or_else(|| Error::Unsupported("the filesystem has no quota feature".into()))?;
        Ok(f(&q))
    }

    /// The usage and limits of `id` in the `ty` quota (None: no entry,
    /// i.e. nothing used and no limits). Unsupported without quotas.
    pub fn quota(&self, ty: QuotaType, id: u32) -> Result<Option<QuotaEntry>> {
        self.with_quotas(|q| q.get(ty, id))
    }

    /// Every entry of the `ty` quota, by id: usage and limits, for a
    /// `repquota`-style report.
    pub fn quota_entries(&self, ty: QuotaType) -> Result<Vec<QuotaEntry>> {
        self.with_quotas(|q| q.entries(ty))
    }

    /// Sets the limits of `id` in the `ty` quota (journaled).
    pub fn set_quota_limits(&self, ty: QuotaType, id: u32, limits: QuotaLimits) -> Result<()> {
        let rw = self.rw()?;
        let q = rw.quota.as_ref().ok_or_else(|| Error::Unsupported("the filesystem has no quota feature".into()))?;
        let tx = self.begin(QUOTA_OP_CREDITS)?;
        let r = q.set_limits(&tx, ty, id, limits);
        tx.settle_unless_broken(r.as_ref().err());
        r
    }

    /// The grace periods (space, inodes; seconds) of the `ty` quota (None:
    /// no such quota file).
    pub fn quota_grace(&self, ty: QuotaType) -> Result<Option<(u32, u32)>> {
        self.with_quotas(|q| q.grace(ty))
    }

    /// Sets the grace periods (seconds) of the `ty` quota: how long usage
    /// may stay past a soft limit before it counts as a hard one.
    pub fn set_quota_grace(&self, ty: QuotaType, space: u32, inodes: u32) -> Result<()> {
        let rw = self.rw()?;
        let q = rw.quota.as_ref().ok_or_else(|| Error::Unsupported("the filesystem has no quota feature".into()))?;
        let tx = self.begin(QUOTA_OP_CREDITS)?;
        let r = q.set_grace(&tx, ty, space, inodes);
        tx.settle_unless_broken(r.as_ref().err());
        r
    }

    /// Refuses (EDQUOT) `bytes` more space for inode `ino` past a limit
    /// of its owners: what a buffered write checks before it reserves
    /// blocks, with `bytes` covering this file's data still waiting for
    /// writeback (writeback itself is never refused). Other files' data
    /// waiting for writeback is not counted, so buffered writes to
    /// several files at once can pass a limit by what is still dirty.
    pub(crate) fn check_buffered_quota(&self, ino: u32, bytes: u64) -> Result<()> {
        let Some(rw) = self.live() else { return Ok(()) };
        let Some(q) = rw.quota.as_ref().filter(|q| q.tracks(ino)) else { return Ok(()) };
        if rw.txns.use_reserved() {
            return Ok(());
        }
        let i = self.load(ino)?;
        q.check([i.uid, i.gid, i.projid], bytes, 0)
    }

    /// The project id and inheritance flag of inode `ino`
    /// (FS_IOC_FSGETXATTR, `lsattr -p`): which project quota its blocks
    /// count against.
    pub fn project(&self, ino: u32) -> Result<ProjectAttr> {
        let i = self.load(ino)?;
        Ok(ProjectAttr { projid: i.projid, inherit: i.flags & FL_PROJINHERIT != 0 })
    }

    /// Sets the project id and inheritance flag of inode `ino` (the
    /// kernel's ext4_ioctl_setproject and the PROJINHERIT flag of
    /// FS_IOC_FSSETXATTR). A project change moves the file's usage to the
    /// new project, refused with EDQUOT past its hard limits. Needs the
    /// `project` feature and an inode with room for the project field
    /// (EOPNOTSUPP otherwise, for any project but 0). An immutable inode
    /// keeps its project (EPERM).
    pub fn set_project(&self, ino: u32, attr: ProjectAttr) -> Result<()> {
        let rw = self.rw()?;
        if !self.vol.sb.features.has_ro_compat(ro_compat::PROJECT) {
            if attr.projid == 0 && !attr.inherit {
                return Ok(());
            }
            return Err(Error::Unsupported("the filesystem has no project feature".into()));
        }
        let _l = rw.data.locks().lock_exclusive(&[], &[ino]);
        let mut i = self.load(ino)?;
        self.check_live(&i)?;
        // An immutable inode keeps its project (EPERM), as in ext4.
        crate::fs::namespace::flags::check_mutable(&i)?;
        let flags = if attr.inherit { i.flags | FL_PROJINHERIT } else { i.flags & !FL_PROJINHERIT };
        if i.projid == attr.projid && i.flags == flags {
            return Ok(());
        }
        if i.projid != attr.projid && GOOD_OLD_INODE_SIZE + usize::from(i.extra_isize) < 0x9C + 4 {
            return Err(Error::Unsupported(format!("inode {ino} has no room for a project id")));
        }
        let tx = self.begin(QUOTA_OP_CREDITS)?;
        if i.projid != attr.projid {
            tx.check_quota_move(&i, [i.uid, i.gid, attr.projid])?;
        }
        i.projid = attr.projid;
        i.flags = flags;
        i.ctime = Timestamp::now();
        tx.write_inode(&mut i)?;
        self.note_tid(&tx, &[ino]);
        Ok(())
    }
}
