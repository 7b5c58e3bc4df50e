//! `PROCMAP_QUERY` (Linux 6.11 and later; `struct procmap_query` in include/uapi/linux/fs.h,
//! served by fs/proc/task_mmu.c): asks an open `proc/PID/maps` for the one mapping that covers
//! an address. Reading the whole maps file formats every mapping's line and path, which for a
//! large process costs far more than one lookup; this answers one address in one ioctl.
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// `_IOWR(PROCFS_IOCTL_MAGIC = 'f', 17, struct procmap_query)`, the struct being 104 bytes.
const PROCMAP_QUERY: u64 = 0xC068_6611;
/// Only a mapping that is executable matches (`PROCMAP_QUERY_VMA_EXECUTABLE`); without
/// `PROCMAP_QUERY_COVERING_OR_NEXT_VMA` only the mapping covering the address is answered.
const VMA_EXECUTABLE: u64 = 0x04;
/// Room for the mapping's name: a path is at most PATH_MAX bytes with its terminating NUL.
const NAME_MAX: usize = 4096;

/// The uapi struct, field for field.
#[repr(C)]
#[derive(Default)]
struct ProcmapQuery {
    size: u64,
    query_flags: u64,
    query_addr: u64,
    vma_start: u64,
    vma_end: u64,
    vma_flags: u64,
    vma_page_size: u64,
    vma_offset: u64,
    inode: u64,
    dev_major: u32,
    dev_minor: u32,
    vma_name_size: u32,
    build_id_size: u32,
    vma_name_addr: u64,
    build_id_addr: u64,
}

/// The executable mapping an address lies in, as the kernel describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Vma {
    pub start: u64,
    pub end: u64,
    /// File offset of `start`.
    pub offset: u64,
    pub inode: u64,
    /// What the maps file prints in its path column (empty for anonymous memory).
    pub name: Vec<u8>,
}

/// The executable mapping of `maps` (an open `proc/PID/maps`) that covers `addr`: `Ok(None)`
/// where none does. An error says the file does not answer queries (`ENOTTY`: a kernel before
/// 6.11, or a plain file standing in for one) or the process is gone (`ESRCH`).
pub fn executable_at(maps: &File, addr: u64) -> io::Result<Option<Vma>> {
    let mut name = vec![0u8; NAME_MAX];
    let mut q = ProcmapQuery {
        size: std::mem::size_of::<ProcmapQuery>() as u64,
        query_flags: VMA_EXECUTABLE,
        query_addr: addr,
        vma_name_size: NAME_MAX as u32,
        vma_name_addr: name.as_mut_ptr() as u64,
        ..ProcmapQuery::default()
    };
    // SAFETY: `q` is the uapi struct with its own size set; the kernel writes at most
    // `vma_name_size` bytes to `name`, which outlives the call.
    let rc = unsafe { libc::ioctl(maps.as_raw_fd(), PROCMAP_QUERY as _, &mut q) };
    if rc != 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ENOENT) => Ok(None),
            _ => Err(e),
        };
    }
    // The size the kernel sets counts the terminating NUL (0 where the mapping has no name).
    name.truncate((q.vma_name_size as usize).saturating_sub(1).min(NAME_MAX));
    Ok(Some(Vma {
        start: q.vma_start,
        end: q.vma_end,
        offset: q.vma_offset,
        inode: q.inode,
        name,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_query_struct_is_the_size_the_ioctl_number_encodes() {
        assert_eq!(
            std::mem::size_of::<ProcmapQuery>() as u64,
            (PROCMAP_QUERY >> 16) & 0x3fff
        );
    }

    /// This test's own code lies in an executable file mapping the kernel names; a plain file
    /// does not answer (the caller then reads the maps whole).
    #[test]
    fn own_code_is_found_in_its_executable() {
        let maps = File::open("/proc/self/maps").expect("own maps");
        let here = own_code_is_found_in_its_executable as *const () as usize as u64;
        match executable_at(&maps, here) {
            Ok(Some(v)) => {
                assert!(v.start <= here && here < v.end, "{v:?}");
                let exe = std::fs::canonicalize("/proc/self/exe").expect("own exe");
                assert_eq!(v.name, exe.as_os_str().as_encoded_bytes(), "{v:?}");
                // The stack is mapped, but not executable: no answer.
                let local = 0u64;
                assert_eq!(
                    executable_at(&maps, &local as *const u64 as u64).ok(),
                    Some(None)
                );
                assert_eq!(executable_at(&maps, 0x10).ok(), Some(None));
            }
            // A kernel before 6.11 does not know the ioctl.
            Ok(None) => panic!("own code at {here:#x} was not found"),
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::ENOTTY), "{e}"),
        }
        let plain = tempfile::NamedTempFile::new().expect("temp file");
        let err = executable_at(plain.as_file(), here).expect_err("a plain file answers nothing");
        assert_eq!(err.raw_os_error(), Some(libc::ENOTTY));
    }
}
