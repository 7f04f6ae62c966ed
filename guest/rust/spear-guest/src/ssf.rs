//! SSF v1 frames, what user streams carry: a 32-byte little-endian header
//! (magic `SPST`, version 1, header_len, msg_type, flags, stream_id, seq,
//! meta_len, data_len), then meta (JSON, may be empty) and data.

use crate::errno::Errno;
pub use crate::sys::{
    SSF_ACK, SSF_CLOSE, SSF_COMMIT, SSF_DATA, SSF_ERROR, SSF_HEADER_LEN, SSF_OPEN, SSF_PING, SSF_PONG,
};

/// One frame; `meta` and `data` borrow from the bytes it was parsed from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame<'a> {
    pub msg_type: u16,
    pub flags: u16,
    pub stream_id: u32,
    pub seq: u64,
    pub meta: &'a [u8],
    pub data: &'a [u8],
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut x = [0u8; 4];
    x.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(x)
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(x)
}

impl<'a> Frame<'a> {
    /// A DATA frame (flags 0).
    pub fn data(stream_id: u32, seq: u64, meta: &'a [u8], data: &'a [u8]) -> Frame<'a> {
        Frame { msg_type: SSF_DATA, flags: 0, stream_id, seq, meta, data }
    }

    /// Splits one whole frame; `Err(Inval)` if `buf` is not exactly one SSF
    /// v1 frame. Header bytes past 32 (an extension) are skipped.
    pub fn parse(buf: &'a [u8]) -> Result<Frame<'a>, Errno> {
        if buf.len() < SSF_HEADER_LEN || &buf[..4] != b"SPST" || u16_at(buf, 4) != 1 {
            return Err(Errno::Inval);
        }
        let header_len = u16_at(buf, 6) as usize;
        if header_len < SSF_HEADER_LEN || header_len > buf.len() {
            return Err(Errno::Inval);
        }
        let (meta_len, data_len) = (u32_at(buf, 24) as u64, u32_at(buf, 28) as u64);
        if meta_len + data_len != (buf.len() - header_len) as u64 {
            return Err(Errno::Inval);
        }
        let (meta, data) = buf[header_len..].split_at(meta_len as usize);
        Ok(Frame {
            msg_type: u16_at(buf, 8),
            flags: u16_at(buf, 10),
            stream_id: u32_at(buf, 12),
            seq: u64_at(buf, 16),
            meta,
            data,
        })
    }

    /// The meta as text (`""` when empty); `None` if it is not UTF-8.
    pub fn meta_str(&self) -> Option<&'a str> {
        std::str::from_utf8(self.meta).ok()
    }

    /// The encoded length: header, meta and data.
    pub fn encoded_len(&self) -> usize {
        SSF_HEADER_LEN + self.meta.len() + self.data.len()
    }

    /// Replaces `out`'s contents with the encoded frame (a 32-byte header).
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        out.clear();
        out.reserve(self.encoded_len());
        out.extend_from_slice(b"SPST");
        out.extend_from_slice(&1u16.to_le_bytes());
        out.extend_from_slice(&(SSF_HEADER_LEN as u16).to_le_bytes());
        out.extend_from_slice(&self.msg_type.to_le_bytes());
        out.extend_from_slice(&self.flags.to_le_bytes());
        out.extend_from_slice(&self.stream_id.to_le_bytes());
        out.extend_from_slice(&self.seq.to_le_bytes());
        out.extend_from_slice(&(self.meta.len() as u32).to_le_bytes());
        out.extend_from_slice(&(self.data.len() as u32).to_le_bytes());
        out.extend_from_slice(self.meta);
        out.extend_from_slice(self.data);
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode_into(&mut out);
        out
    }
}
