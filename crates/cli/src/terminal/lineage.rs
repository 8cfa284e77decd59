//! Session listings with each sub-agent right under its parent, the same in `ctl sessions` and
//! `intendant sessions`.

use std::collections::{HashMap, HashSet};

/// `rows` in listing order with each sub-agent right under its parent (depth 1 for a child, 2
/// for a grandchild, ...), siblings in listing order. A row whose parent is not listed is a top
/// row, and so is one in a loop of parents (damaged records): every row is listed once. `id`
/// and `parent` read a row's.
pub fn nested<'a, T>(
    rows: &'a [T],
    id: impl Fn(&'a T) -> &'a str,
    parent: impl Fn(&'a T) -> Option<&'a str>,
) -> Vec<(usize, &'a T)> {
    let listed: HashSet<&str> = rows.iter().map(&id).collect();
    let mut children: HashMap<&str, Vec<usize>> = HashMap::new();
    let mut top = Vec::new();
    for (at, row) in rows.iter().enumerate() {
        match parent(row).filter(|p| listed.contains(p)) {
            Some(p) => children.entry(p).or_default().push(at),
            None => top.push(at),
        }
    }
    let mut shown = vec![false; rows.len()];
    let mut out = Vec::with_capacity(rows.len());
    let mut stack: Vec<(usize, usize)> = top.into_iter().rev().map(|at| (0, at)).collect();
    let mut next_unshown = 0;
    loop {
        let Some((depth, at)) = stack.pop().or_else(|| {
            // What no top row leads to (a loop of parents) starts a top row of its own.
            while next_unshown < rows.len() && shown[next_unshown] {
                next_unshown += 1;
            }
            (next_unshown < rows.len()).then_some((0, next_unshown))
        }) else {
            return out;
        };
        if std::mem::replace(&mut shown[at], true) {
            continue;
        }
        out.push((depth, &rows[at]));
        if let Some(kids) = children.get(id(&rows[at])) {
            stack.extend(kids.iter().rev().map(|&kid| (depth + 1, kid)));
        }
    }
}

/// The id cell of a row at `depth`: `└ ` under its parent, two spaces more per level.
pub fn id_cell(id: &str, depth: usize) -> String {
    match depth {
        0 => id.to_owned(),
        _ => format!("{}└ {id}", "  ".repeat(depth - 1)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sub_agents_come_right_under_their_parents_and_every_row_once() {
        let rows = [
            ("a", None),
            ("b", None),
            ("a1", Some("a")),
            ("b1", Some("b")),
            ("a1x", Some("a1")),
            ("a2", Some("a")),
            ("orphan", Some("gone")),
            ("loop1", Some("loop2")),
            ("loop2", Some("loop1")),
        ];
        let order: Vec<(usize, &str)> = nested(&rows, |r| r.0, |r| r.1)
            .into_iter()
            .map(|(depth, r)| (depth, r.0))
            .collect();
        assert_eq!(
            order,
            [
                (0, "a"),
                (1, "a1"),
                (2, "a1x"),
                (1, "a2"),
                (0, "b"),
                (1, "b1"),
                (0, "orphan"),
                (0, "loop1"),
                (1, "loop2"),
            ]
        );
        assert_eq!(id_cell("a", 0), "a");
        assert_eq!(id_cell("a1x", 2), "  └ a1x");
    }
}
