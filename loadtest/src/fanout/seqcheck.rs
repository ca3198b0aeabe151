//! A follower's ordering check: every seq from its start through the last acked one
//! received once and in order, telling gaps, duplicates and late arrivals apart with no
//! allocation while all is well.

/// Missing ranges a follower remembers, so that a late arrival can be told from a duplicate.
const MAX_HOLES: usize = 64;

/// One follower's view of the seqs it received: in order from `from`, gaps (seqs skipped),
/// late arrivals of skipped seqs (out of order) and duplicates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeqCheck {
    from: u64,
    /// The next seq in order.
    next: u64,
    received: u64,
    duplicates: u64,
    out_of_order: u64,
    /// Inclusive ranges skipped and not received since, oldest first (empty while all is
    /// well: no allocation for a healthy follower).
    holes: Vec<(u64, u64)>,
    /// Skipped seqs past [`MAX_HOLES`] ranges, counted but not remembered (a late one of them
    /// counts as a duplicate).
    untracked: u64,
}

/// How a follower fared, from the check at the end of the run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Seqs of `from..=last` never received.
    pub missing: u64,
    pub duplicates: u64,
    pub out_of_order: u64,
}

impl Verdict {
    pub fn complete(&self) -> bool {
        self.missing == 0 && self.duplicates == 0 && self.out_of_order == 0
    }
}

impl SeqCheck {
    pub fn new(from: u64) -> SeqCheck {
        SeqCheck {
            from,
            next: from,
            received: 0,
            duplicates: 0,
            out_of_order: 0,
            holes: Vec::new(),
            untracked: 0,
        }
    }

    /// The seq expected next.
    pub fn next(&self) -> u64 {
        self.next
    }

    pub fn received(&self) -> u64 {
        self.received
    }

    /// A follower received `seq`.
    pub fn on(&mut self, seq: u64) {
        self.received += 1;
        if seq == self.next {
            self.next += 1;
        } else if seq > self.next {
            if self.holes.len() < MAX_HOLES {
                self.holes.push((self.next, seq - 1));
            } else {
                self.untracked += seq - self.next;
            }
            self.next = seq + 1;
        } else if let Some(i) = self
            .holes
            .iter()
            .position(|(a, b)| (*a..=*b).contains(&seq))
        {
            // A skipped seq arriving late: delivered, but not in order.
            self.out_of_order += 1;
            let (a, b) = self.holes[i];
            match (seq == a, seq == b) {
                (true, true) => {
                    self.holes.remove(i);
                }
                (true, false) => self.holes[i].0 = seq + 1,
                (false, true) => self.holes[i].1 = seq - 1,
                (false, false) => {
                    self.holes[i].1 = seq - 1;
                    self.holes.insert(i + 1, (seq + 1, b));
                }
            }
        } else {
            // Received before, or before the start: sent twice.
            self.duplicates += 1;
        }
    }

    /// The check through `last` (the last acked seq of the run): every seq of `from..=last`
    /// received once, in order.
    pub fn verdict(&self, last: u64) -> Verdict {
        let in_holes: u64 = self
            .holes
            .iter()
            .filter(|(a, _)| *a <= last)
            .map(|(a, b)| (*b).min(last) - a + 1)
            .sum();
        let tail = (last + 1).saturating_sub(self.next);
        Verdict {
            missing: in_holes + self.untracked + tail,
            duplicates: self.duplicates,
            out_of_order: self.out_of_order,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(seqs: &[u64], from: u64, last: u64) -> Verdict {
        let mut c = SeqCheck::new(from);
        for s in seqs {
            c.on(*s);
        }
        c.verdict(last)
    }

    #[test]
    fn the_ordering_check_tells_gaps_duplicates_and_late_arrivals_apart() {
        let v = |missing, duplicates, out_of_order| Verdict {
            missing,
            duplicates,
            out_of_order,
        };
        assert_eq!(check(&[5, 6, 7, 8], 5, 8), v(0, 0, 0));
        assert!(check(&[5, 6, 7, 8], 5, 8).complete());
        // Events past the last acked seq (a request whose answer was lost) are fine.
        assert_eq!(check(&[5, 6, 7, 8, 9], 5, 8), v(0, 0, 0));
        // Nothing acked: nothing to receive.
        assert_eq!(check(&[], 5, 4), v(0, 0, 0));
        // The tail not received.
        assert_eq!(check(&[5, 6], 5, 8), v(2, 0, 0));
        assert_eq!(check(&[], 5, 8), v(4, 0, 0));
        // A hole, and a start that is not the start.
        assert_eq!(check(&[5, 8], 5, 8), v(2, 0, 0));
        assert_eq!(check(&[7, 8], 5, 8), v(2, 0, 0));
        // Duplicates: again, and before the start.
        assert_eq!(check(&[5, 6, 6, 7, 5, 8], 5, 8), v(0, 2, 0));
        assert_eq!(check(&[4, 5, 6, 7, 8], 5, 8), v(0, 1, 0));
        // Late arrivals fill their holes but are out of order; the middle of a hole too.
        assert_eq!(check(&[5, 7, 6, 8], 5, 8), v(0, 0, 1));
        assert_eq!(check(&[5, 10, 7, 6, 9], 5, 10), v(1, 0, 3));
        assert_eq!(check(&[5, 10, 7, 7], 5, 10), v(3, 1, 1));
        // A hole past the last acked seq does not count.
        assert_eq!(check(&[5, 6, 9], 5, 6), v(0, 0, 0));
        assert_eq!(check(&[5, 6, 9], 5, 7), v(1, 0, 0));
        // Holes beyond what is remembered are still counted as missing.
        let seqs: Vec<u64> = (0..200).map(|i| 1 + 2 * i).collect();
        assert_eq!(check(&seqs, 1, 399), v(199, 0, 0));
    }
}
