//! A small deterministic generator (xorshift64*) for the sans-IO parts that draw at
//! random (hold-downs, jitter) and for their simulations: seeded by the caller, so a
//! run can be repeated, and no crate needed. Not for anything secret.

/// xorshift64* state; a seed of 0 is replaced by a fixed odd one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Draws(u64);

impl Draws {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = if self.0 == 0 {
            0x9e37_79b9_7f4a_7c15
        } else {
            self.0
        };
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_repeat_by_seed_and_spread_over_the_unit_interval() {
        let (mut a, mut b, mut c) = (Draws::new(7), Draws::new(7), Draws::new(8));
        let xs: Vec<f64> = (0..10_000).map(|_| a.uniform()).collect();
        assert!((0..10_000).all(|i| b.uniform() == xs[i]));
        assert_ne!(c.uniform(), xs[0]);
        assert!(xs.iter().all(|x| (0.0..1.0).contains(x)));
        let mean = xs.iter().sum::<f64>() / xs.len() as f64;
        assert!((mean - 0.5).abs() < 0.02, "{mean}");
        // A zero seed still draws.
        let mut z = Draws::new(0);
        assert_ne!(z.next_u64(), z.next_u64());
    }
}
