//! nccl-tests arithmetic for one collective and size, without a GPU: buffer geometry (the
//! `size` and `count` columns), in-place pointer offsets, and the data pattern of the
//! correctness check with the value every rank must end up with.
//!
//! Geometry follows nccl-tests' `*GetCollByteCount` (src/*.cu, read for this): for a requested
//! size S and n ranks with float32, `count = S/4`; all_gather and reduce_scatter use a per-rank
//! `base = (count/n) & !3` (16-byte multiple), alltoall a per-peer count of the same form. The
//! `size` column is `max(send, recv)` bytes, and algbw = size / time for every collective.

use ddpcheck_core::collective::Collective;
use ddpcheck_core::num::ToF64;

/// Bytes per element: every sweep is float32 (nccl-tests' `-d float`).
pub const ELT: u64 = 4;
/// nccl-tests' default root for broadcast and reduce.
pub const ROOT: u32 = 0;
/// Values repeat every PERIOD elements; a prime, so misplaced blocks rarely match.
const PERIOD: u64 = 251;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// The count passed to NCCL and nccl-tests' `count` column: per rank (all_reduce,
    /// broadcast, reduce), the send count (all_gather), the receive count (reduce_scatter), per
    /// peer (alltoall).
    pub count: u64,
    /// Elements each rank sends from.
    pub send_elems: u64,
    /// Elements each rank receives into.
    pub recv_elems: u64,
    /// nccl-tests' `size` column: `max(send, recv)` bytes; algbw = bytes / time.
    pub bytes: u64,
}

pub fn geometry(op: Collective, size: u64, ranks: u32) -> Geometry {
    let n = u64::from(ranks.max(1));
    let count = size / ELT;
    let aligned = (count / n) & !(16 / ELT - 1);
    let (param, send, recv) = match op {
        Collective::AllReduce | Collective::Broadcast | Collective::Reduce => (count, count, count),
        Collective::AllGather => (aligned, aligned, aligned * n),
        Collective::ReduceScatter => (aligned, aligned * n, aligned),
        Collective::AllToAll => (aligned, aligned * n, aligned * n),
    };
    Geometry {
        count: param,
        send_elems: send,
        recv_elems: recv,
        bytes: send.max(recv) * ELT,
    }
}

/// Which of a rank's two buffers a pointer is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Buf {
    Send,
    Recv,
}

/// A position in a rank's buffers, in elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ptr {
    pub buf: Buf,
    pub off: u64,
}

/// Source and destination of one call. In place, both live in the receive buffer at
/// nccl-tests' offsets: all_gather sends from `recv + rank·count`, reduce_scatter receives
/// into `recv + rank·count`, the others use `recv` for both.
pub fn pointers(op: Collective, g: &Geometry, rank: u32, in_place: bool) -> (Ptr, Ptr) {
    let r = u64::from(rank);
    if !in_place {
        return (
            Ptr {
                buf: Buf::Send,
                off: 0,
            },
            Ptr {
                buf: Buf::Recv,
                off: 0,
            },
        );
    }
    let at = |off| Ptr {
        buf: Buf::Recv,
        off,
    };
    match op {
        Collective::AllGather => (at(r * g.count), at(0)),
        Collective::ReduceScatter => (at(0), at(r * g.count)),
        _ => (at(0), at(0)),
    }
}

/// Elements each buffer must hold for every op and size of a sweep.
pub fn buffer_elems(ops: &[Collective], sizes: &[u64], ranks: u32) -> u64 {
    ops.iter()
        .flat_map(|&op| sizes.iter().map(move |&s| geometry(op, s, ranks)))
        .map(|g| g.send_elems.max(g.recv_elems))
        .max()
        .unwrap_or(0)
}

fn base(i: u64) -> f64 {
    (i % PERIOD).to_f64() - 125.0
}

/// Element `i` of rank `rank`'s input: a small integer, so every float32 sum over ranks is
/// exact and a check can compare bit for bit.
#[allow(clippy::cast_possible_truncation)] // a small integer: exact in f32
pub fn value(rank: u32, i: u64) -> f32 {
    (base(i) + 3.0 * f64::from(rank)) as f32
}

/// Σ over ranks of `value(s, i)`, computed in closed form.
#[allow(clippy::cast_possible_truncation)] // an integer far below 2^24 for any rank count: exact in f32
fn sum_over_ranks(ranks: u32, i: u64) -> f32 {
    let n = f64::from(ranks);
    (n * base(i) + 3.0 * n * (n - 1.0) / 2.0) as f32
}

/// Whether this rank's result is defined (reduce only delivers to the root) and checked
/// (nccl-tests reports no errors for in-place alltoall).
pub fn checked(op: Collective, rank: u32, in_place: bool) -> bool {
    match op {
        Collective::Reduce => rank == ROOT,
        Collective::AllToAll => !in_place,
        _ => true,
    }
}

/// The rank whose block holds block `block` of a gathered buffer (always below the rank count).
fn rank_of(block: u64) -> u32 {
    u32::try_from(block).unwrap_or(u32::MAX)
}

/// The value element `i` of `rank`'s result region must hold after the call.
pub fn expected(op: Collective, ranks: u32, rank: u32, g: &Geometry, i: u64) -> f32 {
    let c = g.count.max(1);
    let r = u64::from(rank);
    match op {
        Collective::AllReduce | Collective::Reduce => sum_over_ranks(ranks, i),
        Collective::AllGather => value(rank_of(i / c), i % c),
        Collective::ReduceScatter => sum_over_ranks(ranks, r * c + i),
        Collective::AllToAll => value(rank_of(i / c), r * c + i % c),
        Collective::Broadcast => value(ROOT, i),
    }
}

/// Fills `out` with the input of `rank` starting at element `first`.
pub fn fill(rank: u32, first: u64, out: &mut [f32]) {
    for (k, x) in out.iter_mut().enumerate() {
        *x = value(rank, first + k as u64);
    }
}

/// Counts elements of a result chunk (starting at element `first` of the region) that differ
/// from [`expected`]. NaN never matches.
pub fn count_wrong(
    op: Collective,
    ranks: u32,
    rank: u32,
    g: &Geometry,
    first: u64,
    got: &[f32],
) -> u64 {
    got.iter()
        .enumerate()
        .filter(|(k, x)| **x != expected(op, ranks, rank, g, first + *k as u64))
        .count() as u64
}

/// `ncclGetVersion`'s code as a version string: 22809 → "2.28.9"; before 2.9, 2708 → "2.7.8".
pub fn nccl_version_string(code: i32) -> String {
    let c = code.max(0);
    let (major, minor, patch) = if c >= 10000 {
        (c / 10000, (c % 10000) / 100, c % 100)
    } else {
        (c / 1000, (c % 1000) / 100, c % 100)
    };
    format!("{major}.{minor}.{patch}")
}

/// `cuDriverGetVersion`'s code: 13000 → "13.0", 12040 → "12.4".
pub fn cuda_version_string(code: i32) -> String {
    let c = code.max(0);
    format!("{}.{}", c / 1000, (c % 1000) / 10)
}

/// NVML writes bus ids with an 8-digit domain (`00000000:1B:00.0`), CUDA with 4
/// (`0000:1b:00.0`). Both name the same device; this gives CUDA's spelling.
pub fn cuda_bus_id(bus: &str) -> String {
    let b = bus.trim().to_ascii_lowercase();
    let mut parts: Vec<&str> = b.split(':').collect();
    if parts.len() == 3 && parts[0].len() > 4 && parts[0].starts_with("0000") {
        parts[0] = &parts[0][parts[0].len() - 4..];
    }
    parts.join(":")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::int::size_t;
    use ddpcheck_core::num::len_u32;

    #[test]
    fn geometry_matches_nccl_tests() {
        // all_reduce: size and count per rank.
        let g = geometry(Collective::AllReduce, 1 << 20, 8);
        assert_eq!((g.count, g.bytes), (262_144, 1 << 20));
        // all_gather on 3 ranks, 1 MiB: count 262144, base = 87381 & !3 = 87380,
        // size = 87380 × 3 × 4 = 1048560 (the total received).
        let g = geometry(Collective::AllGather, 1 << 20, 3);
        assert_eq!(
            (g.count, g.send_elems, g.recv_elems, g.bytes),
            (87_380, 87_380, 262_140, 1_048_560)
        );
        // reduce_scatter mirrors it: size is what each rank sends.
        let g = geometry(Collective::ReduceScatter, 1 << 20, 3);
        assert_eq!(
            (g.count, g.send_elems, g.recv_elems),
            (87_380, 262_140, 87_380)
        );
        // alltoall: count per peer.
        let g = geometry(Collective::AllToAll, 4096, 2);
        assert_eq!((g.count, g.send_elems, g.bytes), (512, 1024, 4096));
        // Tiny sizes round to zero elements, as nccl-tests prints them.
        assert_eq!(geometry(Collective::AllGather, 8, 2).bytes, 0);
        assert_eq!(geometry(Collective::AllReduce, 3, 2).count, 0);
    }

    #[test]
    fn in_place_offsets() {
        let g = geometry(Collective::AllGather, 4096, 4);
        let (s, d) = pointers(Collective::AllGather, &g, 2, true);
        assert_eq!((s.buf, s.off, d.off), (Buf::Recv, 2 * g.count, 0));
        let g = geometry(Collective::ReduceScatter, 4096, 4);
        let (s, d) = pointers(Collective::ReduceScatter, &g, 3, true);
        assert_eq!((s.off, d.buf, d.off), (0, Buf::Recv, 3 * g.count));
        let (s, d) = pointers(Collective::AllReduce, &g, 3, false);
        assert_eq!((s.buf, d.buf), (Buf::Send, Buf::Recv));
    }

    /// NCCL's semantics written out independently, on host memory: for each rank, a send and
    /// a receive buffer. Inputs are read before any output is written.
    fn emulate(op: Collective, n: u32, g: &Geometry, in_place: bool, mem: &mut [[Vec<f32>; 2]]) {
        let c = size_t(g.count);
        let idx = |b: Buf| if b == Buf::Send { 0 } else { 1 };
        let src: Vec<Vec<f32>> = (0..n)
            .map(|r| {
                let (s, _) = pointers(op, g, r, in_place);
                let o = size_t(s.off);
                mem[r as usize][idx(s.buf)][o..o + size_t(g.send_elems)].to_vec()
            })
            .collect();
        for r in 0..n as usize {
            let (_, d) = pointers(op, g, len_u32(r), in_place);
            let out = &mut mem[r][idx(d.buf)][size_t(d.off)..];
            match op {
                Collective::AllReduce => {
                    for k in 0..c {
                        out[k] = src.iter().map(|s| s[k]).sum();
                    }
                }
                Collective::Reduce => {
                    if r == ROOT as usize {
                        for k in 0..c {
                            out[k] = src.iter().map(|s| s[k]).sum();
                        }
                    }
                }
                Collective::Broadcast => out[..c].copy_from_slice(&src[ROOT as usize][..c]),
                Collective::AllGather => {
                    for (s, data) in src.iter().enumerate() {
                        out[s * c..s * c + c].copy_from_slice(&data[..c]);
                    }
                }
                Collective::ReduceScatter => {
                    for k in 0..c {
                        out[k] = src.iter().map(|s| s[r * c + k]).sum();
                    }
                }
                Collective::AllToAll => {
                    for (j, data) in src.iter().enumerate() {
                        out[j * c..j * c + c].copy_from_slice(&data[r * c..r * c + c]);
                    }
                }
            }
        }
    }

    #[test]
    fn pattern_and_expectations_agree_with_nccl_semantics() {
        for op in Collective::ALL {
            for n in [1u32, 2, 3, 4, 8] {
                for size in [4096u64, 10_000, 1 << 16] {
                    for in_place in [false, true] {
                        let g = geometry(op, size, n);
                        let elems = size_t(buffer_elems(&[op], &[size], n));
                        let mut mem: Vec<[Vec<f32>; 2]> = (0..n)
                            .map(|_| [vec![0.0; elems], vec![0.0; elems]])
                            .collect();
                        for r in 0..n {
                            let (s, _) = pointers(op, &g, r, in_place);
                            let b = if s.buf == Buf::Send { 0 } else { 1 };
                            let o = size_t(s.off);
                            fill(r, 0, &mut mem[r as usize][b][o..o + size_t(g.send_elems)]);
                        }
                        emulate(op, n, &g, in_place, &mut mem);
                        for r in 0..n {
                            if !checked(op, r, in_place) {
                                continue;
                            }
                            let (_, d) = pointers(op, &g, r, in_place);
                            let o = size_t(d.off);
                            let region = &mut mem[r as usize][1][o..o + size_t(g.recv_elems)];
                            let ctx =
                                format!("{op} n={n} size={size} in_place={in_place} rank={r}");
                            assert_eq!(count_wrong(op, n, r, &g, 0, region), 0, "{ctx}");
                            if !region.is_empty() {
                                // A single corrupted element is counted, also in a later chunk.
                                let last = region.len() - 1;
                                region[last] += 1.0;
                                let (a, b) = region.split_at(last);
                                let wrong = count_wrong(op, n, r, &g, 0, a)
                                    + count_wrong(op, n, r, &g, last as u64, b);
                                assert_eq!(wrong, 1, "{ctx}");
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn ranks_send_different_data() {
        // Swapped blocks between ranks must show up in an all_gather check.
        assert_ne!(value(0, 7), value(1, 7));
        assert_ne!(value(0, 7), value(0, 8));
    }

    #[test]
    fn versions_and_bus_ids() {
        assert_eq!(nccl_version_string(22809), "2.28.9");
        assert_eq!(nccl_version_string(21803), "2.18.3");
        assert_eq!(nccl_version_string(2708), "2.7.8");
        assert_eq!(cuda_version_string(13000), "13.0");
        assert_eq!(cuda_version_string(12040), "12.4");
        assert_eq!(cuda_bus_id("00000000:1B:00.0"), "0000:1b:00.0");
        assert_eq!(cuda_bus_id("0000:1b:00.0"), "0000:1b:00.0");
        assert_eq!(cuda_bus_id("1b:00.0"), "1b:00.0");
    }
}
