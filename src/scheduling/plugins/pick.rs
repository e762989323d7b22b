//! What the three pickers share: the `maxNumOfEndpoints` parameter and top-N selection.

use serde::Deserialize;

use crate::scheduling::{parse_params, PluginError, ScoredCandidate};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PickerParams {
    max_num_of_endpoints: Option<i64>,
}

/// Decodes `{maxNumOfEndpoints}` (default 1, must be ≥ 1).
pub(crate) fn max_num_of_endpoints(
    name: &str,
    type_name: &str,
    params: Option<&serde_json::Value>,
) -> Result<usize, PluginError> {
    let p: PickerParams = parse_params(name, type_name, params)?;
    match p.max_num_of_endpoints {
        None => Ok(1),
        Some(n) if n >= 1 => Ok(usize::try_from(n).unwrap_or(usize::MAX)),
        Some(n) => Err(PluginError::new(
            name,
            type_name,
            format!("parameter `maxNumOfEndpoints` must be >= 1, got {n}"),
        )),
    }
}

/// Moves the `n` largest items (by `key`, descending) to the front in descending order and returns how
/// many were taken. Linear selection then a sort of the top `n` only, so a 1,000-endpoint pool costs
/// O(endpoints), not O(endpoints · log). Among equal keys the result depends only on positions, so callers
/// that shuffle first break ties uniformly at random.
pub(crate) fn top_n_desc<T>(items: &mut [T], n: usize, key: impl Fn(&T) -> f64) -> usize {
    let n = n.min(items.len());
    if n == 0 {
        return 0;
    }
    let desc = |a: &T, b: &T| key(b).total_cmp(&key(a));
    if n < items.len() {
        items.select_nth_unstable_by(n - 1, desc);
    }
    items[..n].sort_by(desc);
    n
}

/// Writes the candidate indices of the first `n` scored entries into `out`.
pub(crate) fn emit(scored: &[ScoredCandidate], n: usize, out: &mut Vec<usize>) {
    out.extend(scored.iter().take(n).map(|s| s.index));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_n_orders_the_largest() {
        let mut v = [3.0, 9.0, 1.0, 7.0, 5.0];
        assert_eq!(top_n_desc(&mut v, 3, |x| *x), 3);
        assert_eq!(v[..3], [9.0, 7.0, 5.0]);
        let mut v = [2.0, 1.0];
        assert_eq!(top_n_desc(&mut v, 5, |x| *x), 2);
        assert_eq!(v, [2.0, 1.0]);
        assert_eq!(top_n_desc(&mut [] as &mut [f64], 1, |x| *x), 0);
    }
}
