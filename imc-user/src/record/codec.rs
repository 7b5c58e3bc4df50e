//! Byte-level helpers of the recording format: LEB128 varints, zigzag, CRC-32 (IEEE, as zlib
//! and gzip use, so `python3 -c 'import zlib'` can check a chunk by hand).
use bytes::{BufMut, BytesMut};

/// CRC-32 table for the reflected IEEE polynomial 0xEDB88320, built at compile time. A
/// `static`, not a `const`: an unoptimized build copies a `const` array onto the stack at each
/// index, 1 KiB per byte checked.
static CRC_TABLE: [u32; 256] = {
    let mut t = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                0xEDB8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
            k += 1;
        }
        t[i] = c;
        i += 1;
    }
    t
};

pub fn crc32(parts: &[&[u8]]) -> u32 {
    let mut c = !0u32;
    for p in parts {
        for &b in *p {
            c = CRC_TABLE[((c ^ u32::from(b)) & 0xff) as usize] ^ (c >> 8);
        }
    }
    !c
}

/// Appends `v` as LEB128 to any byte sink (`Vec<u8>`, `BytesMut`).
#[inline]
pub fn put_varint(out: &mut impl BufMut, mut v: u64) {
    while v >= 0x80 {
        out.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    out.put_u8(v as u8);
}

/// Bytes `put_varint` writes for `v`.
pub fn varint_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

/// Appends one framed chunk: type, payload length, payload, CRC of the three.
pub fn put_chunk(out: &mut BytesMut, kind: u8, payload: &[u8]) {
    let start = out.len();
    out.put_u8(kind);
    out.put_u32_le(payload.len() as u32);
    out.put_slice(payload);
    let crc = crc32(&[&out[start..]]);
    out.put_u32_le(crc);
}

/// Bytes of a framed chunk around a payload of `len` bytes.
pub const fn framed(len: usize) -> u64 {
    9 + len as u64
}

#[inline]
pub fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

#[inline]
pub fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// A cursor over one chunk's payload; every read is bounds-checked (the file may be anything).
pub struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

/// The payload ended early or held an impossible value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Malformed;

impl<'a> Cursor<'a> {
    pub fn new(buf: &'a [u8]) -> Cursor<'a> {
        Cursor { buf, pos: 0 }
    }

    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    #[inline]
    pub fn varint(&mut self) -> Result<u64, Malformed> {
        let mut v = 0u64;
        let mut shift = 0u32;
        loop {
            let b = *self.buf.get(self.pos).ok_or(Malformed)?;
            self.pos += 1;
            if shift == 63 && b > 1 {
                return Err(Malformed);
            }
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
            shift += 7;
            if shift > 63 {
                return Err(Malformed);
            }
        }
    }

    pub fn varint_u32(&mut self) -> Result<u32, Malformed> {
        u32::try_from(self.varint()?).map_err(|_| Malformed)
    }

    /// A count of items each at least one byte long: never more than what is left, so a
    /// corrupt count cannot make the reader allocate without bound.
    pub fn count(&mut self) -> Result<usize, Malformed> {
        let n = self.varint()?;
        if n > self.remaining() as u64 {
            return Err(Malformed);
        }
        Ok(n as usize)
    }

    pub fn byte(&mut self) -> Result<u8, Malformed> {
        let b = *self.buf.get(self.pos).ok_or(Malformed)?;
        self.pos += 1;
        Ok(b)
    }

    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], Malformed> {
        let end = self.pos.checked_add(n).ok_or(Malformed)?;
        let s = self.buf.get(self.pos..end).ok_or(Malformed)?;
        self.pos = end;
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc_matches_zlib() {
        // zlib.crc32(b"123456789") == 0xcbf43926, the standard check value.
        assert_eq!(crc32(&[b"1234", b"56789"]), 0xCBF4_3926);
    }

    #[test]
    fn varints_round_trip_and_reject_overlong() {
        let mut out = Vec::new();
        for v in [0, 1, 127, 128, 300, u64::MAX] {
            put_varint(&mut out, v);
        }
        let mut c = Cursor::new(&out);
        for v in [0, 1, 127, 128, 300, u64::MAX] {
            assert_eq!(c.varint(), Ok(v));
        }
        assert_eq!(c.varint(), Err(Malformed));
        assert_eq!(Cursor::new(&[0xff; 11]).varint(), Err(Malformed));
        for v in [0, 1, 127, 128, 16383, 16384, u64::MAX >> 1, u64::MAX] {
            let mut o = Vec::new();
            put_varint(&mut o, v);
            assert_eq!(varint_len(v), o.len(), "{v}");
        }
        for v in [0i64, -1, 1, i64::MIN, i64::MAX] {
            assert_eq!(unzigzag(zigzag(v)), v);
        }
    }
}
