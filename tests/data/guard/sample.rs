use std::collections::HashMap;
use std::fmt;

/// A bounded stack.
#[derive(Debug, Default)]
pub struct Stack<T> {
    items: Vec<T>,
    limit: usize,
}

impl<T: Clone> Stack<T> {
    pub fn new(limit: usize) -> Self {
        Stack { items: Vec::new(), limit }
    }

    pub fn push(&mut self, item: T) -> Result<(), String> {
        if self.items.len() >= self.limit {
            return Err(format!("full at {}", self.limit));
        }
        self.items.push(item);
        Ok(())
    }

    pub fn pop(&mut self) -> Option<T> {
        self.items.pop()
    }
}

impl<T> fmt::Display for Stack<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Stack({} items)", self.items.len())
    }
}

pub fn sum(xs: &[i64]) -> i64 {
    /* alternate signs */
    xs.iter()
        .enumerate()
        .map(|(i, x)| if i % 2 == 0 { *x } else { -*x })
        .sum()
}

pub fn count(words: &str) -> HashMap<&str, usize> {
    let mut out = HashMap::new();
    for w in words.split_whitespace() {
        *out.entry(w).or_insert(0) += 1;
    }
    out
}
