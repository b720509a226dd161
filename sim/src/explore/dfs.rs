//! The choice trie of a stateless depth-first search: each execution
//! starts from nothing, replays a prefix of choices, takes the first
//! option at every choice point past it, and records how many options
//! each point had; the next execution's prefix is the deepest choice with
//! an option left, moved on by one. (Shuttle's DFS scheduler and CHESS
//! enumerate schedules this way.)

/// One execution's choices.
#[derive(Debug, Default)]
pub(crate) struct Chooser {
    /// The choices to replay, one per choice point, in order.
    replay: Vec<u8>,
    /// Each choice point met: the option taken and how many there were.
    trail: Vec<(u8, u8)>,
    /// A replayed choice was out of range at its point: the code under
    /// test is not deterministic in the choices alone.
    diverged: bool,
}

impl Chooser {
    /// An execution that replays `replay`, then takes first options.
    pub(crate) fn new(replay: Vec<u8>) -> Chooser {
        Chooser {
            replay,
            ..Chooser::default()
        }
    }

    /// Which of `options` to take (0 is the first). A point with one
    /// option is no choice and is not recorded.
    pub(crate) fn pick(&mut self, options: usize) -> usize {
        if options <= 1 {
            return 0;
        }
        let options = u8::try_from(options).unwrap_or(u8::MAX);
        let mut chosen = self.replay.get(self.trail.len()).copied().unwrap_or(0);
        if chosen >= options {
            self.diverged = true;
            chosen = 0;
        }
        self.trail.push((chosen, options));
        usize::from(chosen)
    }

    /// The choices taken, one per choice point.
    pub(crate) fn choices(&self) -> Vec<u8> {
        self.trail.iter().map(|(chosen, _)| *chosen).collect()
    }

    /// Whether this execution failed to replay its prefix: fewer choice
    /// points than the prefix names, or a choice out of range.
    pub(crate) fn diverged(&self) -> bool {
        self.diverged || self.trail.len() < self.replay.len()
    }

    /// The prefix of the next execution in depth-first order that keeps
    /// the first `floor` choices (a subtree of its own); `None` once the
    /// subtree is exhausted.
    pub(crate) fn next(&self, floor: usize) -> Option<Vec<u8>> {
        let mut trail = self.trail.clone();
        while trail.len() > floor {
            let (chosen, options) = trail.pop()?;
            if chosen + 1 < options {
                let mut prefix: Vec<u8> = trail.iter().map(|(c, _)| *c).collect();
                prefix.push(chosen + 1);
                return Some(prefix);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tree of two points with 2 then 3 options is walked in six
    /// executions, each once, in depth-first order.
    #[test]
    fn every_leaf_once_in_depth_first_order() {
        let mut prefix = Some(Vec::new());
        let mut leaves = Vec::new();
        while let Some(replay) = prefix {
            let mut c = Chooser::new(replay);
            let a = c.pick(2);
            let b = c.pick(if a == 0 { 3 } else { 1 });
            assert!(!c.diverged());
            leaves.push((a, b));
            prefix = c.next(0);
        }
        assert_eq!(leaves, [(0, 0), (0, 1), (0, 2), (1, 0)]);
    }

    #[test]
    fn a_subtree_stays_under_its_floor() {
        let mut c = Chooser::new(vec![1]);
        c.pick(2);
        c.pick(2);
        assert_eq!(c.next(1), Some(vec![1, 1]));
        let mut c = Chooser::new(vec![1, 1]);
        c.pick(2);
        c.pick(2);
        assert_eq!(c.next(1), None);
    }

    #[test]
    fn a_replay_that_does_not_fit_is_divergence() {
        let mut c = Chooser::new(vec![2]);
        assert_eq!(c.pick(2), 0);
        assert!(c.diverged());
        let c = Chooser::new(vec![0]);
        assert!(c.diverged(), "a prefix longer than the choices met");
    }
}
