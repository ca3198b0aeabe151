//! The Dockerfile read as its instructions: continuation lines joined, comments dropped, split
//! by stage (each stage starts with its `FROM`).

pub const DOCKERFILE: &str = include_str!("../../Dockerfile");

/// One build stage: its instructions in order, `FROM` first, each as (instruction, arguments).
pub struct Stage(pub Vec<(String, String)>);

impl Stage {
    /// The name `FROM … AS name` gives the stage, if any.
    pub fn name(&self) -> Option<&str> {
        let from = &self.0[0].1;
        let words: Vec<&str> = from.split_whitespace().collect();
        match words.as_slice() {
            [.., as_, name] if as_.eq_ignore_ascii_case("as") => Some(name),
            _ => None,
        }
    }

    /// The image or stage it starts from.
    pub fn base(&self) -> &str {
        self.0[0].1.split_whitespace().next().unwrap_or("")
    }

    /// The arguments of every `op` instruction, in order.
    pub fn all(&self, op: &str) -> Vec<&str> {
        self.0
            .iter()
            .filter(|(o, _)| o == op)
            .map(|(_, r)| r.as_str())
            .collect()
    }

    /// The arguments of the last `op` instruction; fails the test without one.
    pub fn last(&self, op: &str) -> &str {
        let all = self.all(op);
        all.last()
            .unwrap_or_else(|| panic!("the {:?} stage has no {op}", self.name()))
    }

    /// The instructions after `FROM`, as (instruction, arguments) pairs of `&str`.
    pub fn steps(&self) -> Vec<(&str, &str)> {
        self.0[1..]
            .iter()
            .map(|(o, r)| (o.as_str(), r.as_str()))
            .collect()
    }
}

pub fn stages() -> Vec<Stage> {
    let mut stages: Vec<Stage> = Vec::new();
    let mut logical = String::new();
    for line in DOCKERFILE.lines() {
        let t = line.trim();
        if t.starts_with('#') || (t.is_empty() && logical.is_empty()) {
            continue;
        }
        if let Some(part) = t.strip_suffix('\\') {
            logical.push_str(part);
            logical.push(' ');
            continue;
        }
        logical.push_str(t);
        let full = std::mem::take(&mut logical);
        let (op, rest) = full.split_once(' ').unwrap_or((&full, ""));
        let op = op.to_ascii_uppercase();
        if op == "FROM" {
            stages.push(Stage(Vec::new()));
        }
        stages
            .last_mut()
            .expect("FROM comes first")
            .0
            .push((op, rest.trim().to_string()));
    }
    stages
}

/// The stage named `name`; fails the test without one.
pub fn stage<'a>(stages: &'a [Stage], name: &str) -> &'a Stage {
    stages
        .iter()
        .find(|s| s.name() == Some(name))
        .unwrap_or_else(|| panic!("no stage `AS {name}` in the Dockerfile"))
}

/// The stage a `COPY --from=…` takes from, and the rest of its arguments.
pub fn copy_from(args: &str) -> Option<(&str, Vec<&str>)> {
    let mut words = args.split_whitespace();
    let from = words.next()?.strip_prefix("--from=")?;
    Some((from, words.collect()))
}
