//! Magic-number division (the very code the kernels run, compiled for the host) against `/`
//! and `%`.

use kernels_gpu::MagicDiv;
use rand::{Rng, SeedableRng, rngs::SmallRng};

fn check_divisor(d: u32, rng: &mut SmallRng) {
    let m = MagicDiv::new(d).unwrap();
    let top = u32::MAX / d * d;
    let fixed = [
        0,
        1,
        d - 1,
        d,
        d.wrapping_add(1),
        d.saturating_mul(2) - 1,
        d.saturating_mul(2),
        d.saturating_mul(7).saturating_add(3),
        top,
        top - 1,
        top.saturating_add(d - 1),
        u32::MAX,
        u32::MAX - 1,
        1 << 31,
        (1 << 31) - 1,
    ];
    let random = (0..8).map(|_| rng.random::<u32>());
    for n in fixed.into_iter().chain(random) {
        assert_eq!(m.div_rem(n), (n / d, n % d), "n = {n}, d = {d}, magic = {m:?}");
    }
}

#[test]
fn every_divisor_up_to_65536() {
    let mut rng = SmallRng::seed_from_u64(1);
    for d in 1..=65536 {
        check_divisor(d, &mut rng);
    }
}

#[test]
fn random_and_edge_divisors_across_the_whole_range() {
    let mut rng = SmallRng::seed_from_u64(2);
    let edges = (0..32).flat_map(|b| {
        let p = 1u64 << b;
        [p - 1, p, p + 1].into_iter().filter(|&d| d >= 1 && d <= u32::MAX as u64).map(|d| d as u32)
    });
    let top = [u32::MAX, u32::MAX - 1, (1 << 31) + 1, 0x8000_0001, 0xffff_fffe];
    for d in edges.chain(top) {
        check_divisor(d, &mut rng);
    }
    for _ in 0..200_000 {
        let d = rng.random_range(1..=u32::MAX);
        check_divisor(d, &mut rng);
    }
}

#[test]
fn zero_is_no_divisor() {
    assert_eq!(MagicDiv::new(0), None);
}

#[test]
fn multiplier_and_shifts_fit_the_documented_form() {
    assert_eq!(MagicDiv::new(1).unwrap(), MagicDiv { divisor: 1, multiplier: 1, shift1: 0, shift2: 0 });
    // d = 7: l = 3, m = floor(2^32 * 1 / 7) + 1.
    assert_eq!(MagicDiv::new(7).unwrap(), MagicDiv { divisor: 7, multiplier: 613_566_757, shift1: 1, shift2: 2 });
    let big = MagicDiv::new(u32::MAX).unwrap();
    assert_eq!((big.shift1, big.shift2), (1, 31));
}
