//! The engine against hand-built trees: the split rule, padding, missing values, every block shape, deep
//! trees, and bad trees refused by node; the export back to nodes predicts what the flattened tree does.

use super::*;

fn split(feature: u32, threshold: f32, default_left: bool, left: u32, right: u32) -> Node {
    Node::Split { feature, threshold, default_left, left, right }
}

/// x0 < 1 → (x1 < 5 → 1.0 | 2.0) | 3.0, NaN in x0 goes right, NaN in x1 goes left.
fn lopsided() -> Vec<Node> {
    vec![
        split(0, 1.0, false, 1, 2),
        split(1, 5.0, true, 3, 4),
        Node::Leaf(3.0),
        Node::Leaf(1.0),
        Node::Leaf(2.0),
    ]
}

#[test]
fn follows_the_split_rule_and_pads_shallow_leaves() {
    let forest = Forest::from_trees(2, 0.5, &[lopsided()]).unwrap();
    assert_eq!(forest.depth(), 2);
    assert_eq!(forest.predict_one(&[0.0, 0.0]), 1.5);
    assert_eq!(forest.predict_one(&[0.0, 5.0]), 2.5, "x == threshold goes right");
    assert_eq!(forest.predict_one(&[1.0, 0.0]), 3.5);
    assert_eq!(forest.predict_one(&[2.0, 9.0]), 3.5);
}

#[test]
fn missing_values_take_the_default_direction() {
    let forest = Forest::from_trees(2, 0.0, &[lopsided()]).unwrap();
    assert_eq!(forest.predict_one(&[f32::NAN, 0.0]), 3.0);
    assert_eq!(forest.predict_one(&[0.0, f32::NAN]), 1.0);
}

#[test]
fn batch_equals_one_by_one_for_every_block_shape() {
    let trees = vec![
        lopsided(),
        vec![split(1, 2.0, false, 1, 2), Node::Leaf(-1.0), Node::Leaf(10.0)],
        vec![Node::Leaf(0.25)],
    ];
    let forest = Forest::from_trees(2, 1.0, &trees).unwrap();
    let rows: Vec<f32> = (0..21 * 2).map(|i| if i == 17 { f32::NAN } else { (i % 7) as f32 * 0.9 }).collect();
    let mut out = vec![0.0; 21];
    forest.predict_batch(&rows, &mut out);
    for (row, got) in rows.chunks(2).zip(&out) {
        let mut expected = 1.0 + 0.25;
        expected += match (row[0], row[1]) {
            (x, _) if x.is_nan() || x >= 1.0 => 3.0,
            (_, y) if y.is_nan() || y < 5.0 => 1.0,
            _ => 2.0,
        };
        expected += if row[1] < 2.0 { -1.0 } else { 10.0 };
        assert_eq!(*got, expected, "row {row:?}");
    }
}

#[test]
fn trees_deeper_than_the_fast_kernels_take_the_general_walk() {
    // A chain of 10 splits on feature 0: x < 1 → leaf 1, else x < 2 → leaf 2, … else leaf 11.
    let mut tree = Vec::new();
    for k in 0..10u32 {
        tree.push(split(0, (k + 1) as f32, false, 2 * k + 1, 2 * k + 2));
        tree.push(Node::Leaf((k + 1) as f32));
    }
    tree.push(Node::Leaf(11.0));
    let forest = Forest::from_trees(1, 0.0, &[tree]).unwrap();
    assert_eq!(forest.depth(), 10);
    let rows: Vec<f32> = (0..12).map(|i| i as f32 + 0.5).collect();
    let mut out = vec![0.0; rows.len()];
    forest.predict_batch(&rows, &mut out);
    let expected: Vec<f32> = (0..12).map(|i| (i + 1).min(11) as f32).collect();
    assert_eq!(out, expected);
}

#[test]
fn single_leaf_forests_and_empty_batches() {
    let forest = Forest::from_trees(3, 1.0, &[vec![Node::Leaf(2.0)], vec![Node::Leaf(0.5)]]).unwrap();
    assert_eq!(forest.depth(), 0);
    let mut out = vec![0.0; 9];
    forest.predict_batch(&[0.0; 27], &mut out);
    assert!(out.iter().all(|&v| v == 3.5));
    forest.predict_batch(&[], &mut []);
}

#[test]
fn bad_trees_are_errors_that_name_the_node() {
    let out_of_range = vec![split(0, 1.0, false, 1, 7), Node::Leaf(1.0)];
    let err = Forest::from_trees(1, 0.0, &[vec![Node::Leaf(0.0)], out_of_range]).unwrap_err();
    assert!(matches!(err, ModelError::Tree { tree: 1, node: 0, .. }), "{err}");
    let bad_feature = vec![split(4, 1.0, false, 1, 1), Node::Leaf(1.0)];
    assert!(matches!(Forest::from_trees(2, 0.0, &[bad_feature]), Err(ModelError::Tree { .. })));
    let cycle = vec![split(0, 1.0, false, 1, 1), split(0, 1.0, false, 0, 0)];
    assert!(matches!(Forest::from_trees(1, 0.0, &[cycle]), Err(ModelError::TooDeep { tree: 0, .. })));
    assert!(matches!(Forest::from_trees(1, 0.0, &[vec![]]), Err(ModelError::Tree { .. })));
}

#[test]
fn exported_trees_fold_padding_and_predict_the_same() {
    let forest = Forest::from_trees(2, 0.5, &[lopsided(), vec![Node::Leaf(3.0)]]).unwrap();
    let first = forest.tree_nodes(0);
    assert_eq!(first, lopsided(), "padding folded back, numbered breadth-first");
    assert_eq!(forest.tree_nodes(1), vec![Node::Leaf(3.0)]);
    let again = Forest::from_trees(2, 0.5, &[first, forest.tree_nodes(1)]).unwrap();
    let grid = [-1.0, 0.0, 0.25, 0.5, 0.75, 1.0, 2.0, f32::NAN];
    for a in grid {
        for b in grid {
            let (x, y) = (forest.predict_one(&[a, b]), again.predict_one(&[a, b]));
            assert_eq!(x.to_bits(), y.to_bits(), "row [{a}, {b}]");
        }
    }
}

/// SplitMix64 for reproducible random forests and rows.
fn unit(state: &mut u64) -> f32 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    ((z ^ (z >> 31)) >> 40) as f32 / (1u64 << 24) as f32
}

/// `n_trees` trees of `depth` over `n_features`, thresholds drawn from `grid` values in [0, 1), some
/// subtrees cut short into leaves (padding).
fn grid_forest(state: &mut u64, n_features: usize, depth: u32, n_trees: usize, grid: f32) -> Forest {
    let trees: Vec<Vec<Node>> = (0..n_trees)
        .map(|_| {
            let mut nodes = vec![Node::Leaf(0.0)];
            let mut open = vec![(0usize, 0u32)];
            while let Some((i, level)) = open.pop() {
                if level == depth || (level > 1 && unit(state) < 0.1) {
                    nodes[i] = Node::Leaf(unit(state) - 0.5);
                    continue;
                }
                let (left, right) = (nodes.len(), nodes.len() + 1);
                nodes.extend([Node::Leaf(0.0), Node::Leaf(0.0)]);
                nodes[i] = split(
                    (unit(state) * n_features as f32) as u32 % n_features as u32,
                    (unit(state) * grid).floor() / grid,
                    unit(state) < 0.5,
                    left as u32,
                    right as u32,
                );
                open.extend([(left, level + 1), (right, level + 1)]);
            }
            nodes
        })
        .collect();
    Forest::from_trees(n_features, 0.125, &trees).unwrap()
}

#[test]
fn the_vector_kernel_predicts_bit_for_bit_what_the_scalar_one_does() {
    let mut state = 1;
    for (n_features, depth) in [(1, 4), (3, 5), (13, 6), (16, 6), (9, 4)] {
        let forest = grid_forest(&mut state, n_features, depth, 37, 64.0);
        assert!(forest.ranked.is_some(), "{n_features} features, depth {depth}: fits the vector kernel");
        // Values on the threshold grid (ties go right), between it, infinities and both zeros.
        let special = [0.0, -0.0, 0.5, 1.0 / 64.0, f32::INFINITY, f32::NEG_INFINITY, -1.0, 2.0];
        for n_rows in [1, 8, 9, 31, 32, 33, 63, 64, 65, 100, 200] {
            let rows: Vec<f32> = (0..n_rows * n_features)
                .map(|i| match i % 3 {
                    0 => (unit(&mut state) * 64.0).floor() / 64.0,
                    1 => unit(&mut state),
                    _ => special[(unit(&mut state) * 8.0) as usize % 8],
                })
                .collect();
            let (mut fast, mut scalar) = (vec![0.0; n_rows], vec![0.0; n_rows]);
            forest.predict_batch(&rows, &mut fast);
            forest.predict_scalar(&rows, &mut scalar);
            for (r, (a, b)) in fast.iter().zip(&scalar).enumerate() {
                assert_eq!(
                    a.to_bits(),
                    b.to_bits(),
                    "{n_features} features, depth {depth}, row {r} of {n_rows}"
                );
            }
        }
    }
}

#[test]
fn forests_outside_the_vector_kernel_keep_the_scalar_one() {
    let mut state = 2;
    assert!(grid_forest(&mut state, 4, 3, 5, 64.0).ranked.is_none(), "depth 3 is too shallow");
    assert!(grid_forest(&mut state, 17, 6, 5, 64.0).ranked.is_none(), "17 features are too many");
    // 300 trees with thresholds on a grid of 2^20: far more than 255 distinct ones per feature.
    let fine = grid_forest(&mut state, 2, 6, 300, (1 << 20) as f32);
    assert!(fine.ranked.is_none(), "more than 255 thresholds on a feature");
    let rows: Vec<f32> = (0..2 * 50).map(|_| unit(&mut state)).collect();
    let (mut batch, mut one) = (vec![0.0; 50], Vec::new());
    fine.predict_batch(&rows, &mut batch);
    one.extend(rows.chunks(2).map(|row| fine.predict_one(row)));
    assert_eq!(batch, one);
}

#[test]
fn the_64_lane_kernel_sums_what_the_32_lane_one_does() {
    // predict_batch above runs whichever kernels this CPU has; this compares the two vector kernels
    // directly where both run (AVX-512 BW and VBMI; elsewhere predict_batch never calls the wide one).
    if !(Ranked::available() && Ranked::wide_available()) {
        eprintln!("this CPU has no AVX-512 BW/VBMI: the 64-lane kernel is not used here");
        return;
    }
    let mut state = 3;
    for (n_features, depth) in [(1, 4), (3, 5), (13, 6), (16, 6)] {
        let forest = grid_forest(&mut state, n_features, depth, 37, 64.0);
        let ranked = forest.ranked.as_ref().expect("fits the vector kernels");
        let rows: Vec<f32> = (0..64 * n_features).map(|_| (unit(&mut state) * 64.0).floor() / 64.0).collect();
        let wide = ranked.wide_sums(&rows, n_features, depth);
        let (first, second) = rows.split_at(32 * n_features);
        let narrow: Vec<f32> = ranked
            .sums(first, n_features, depth)
            .into_iter()
            .chain(ranked.sums(second, n_features, depth))
            .collect();
        let (wide, narrow): (Vec<u32>, Vec<u32>) =
            (wide.iter().map(|x| x.to_bits()).collect(), narrow.iter().map(|x| x.to_bits()).collect());
        assert_eq!(wide, narrow, "{n_features} features, depth {depth}");
    }
}
