//! The shipped bottleneck classifier's weights ([`super::BottleneckClassifier`]): data under
//! the controller that reads it, so that the two do not import each other.
//!
//! Trained by `aggrate testbed bottleneck --runs 6 --train 4 --duration 40` (seed 1; one
//! station, VHT MCS 9 × 1 SS, 80 MHz; a `tc tbf` backhaul of 60–200 Mb/s switched on and off
//! every 2–5 s; reports every 50 ms) on the reports of its four training runs, collected while
//! the loop ran the weights of the round before (themselves trained on runs under a hand-set
//! first guess). The rounds and the verdicts, on held-out runs and in the loop, are in
//! docs/testbed.md. Per report, newest first: `[level ÷ N_ε, shortfall, surplus, queue]`; then
//! the loss over the last 100 packets.

use super::BottleneckWeights;

/// The shipped weights.
pub const SHIPPED: BottleneckWeights = BottleneckWeights {
    w: [
        -8.519892005503342,
        3.103596076200981,
        -19.85124558311371,
        1.6314305847995418, //
        -8.968340954972303,
        19.64235797662869,
        -24.942429706450234,
        0.00826099508399169, //
        -1.1292238400808774,
        30.551115718175293,
        -29.80148611934655,
        2.6175260732252226, //
        -2.145204278858837,
        33.5333407443913,
        -19.487972362749517,
        3.6332284595014555, //
        0.3378546538653452,
        17.329303907480423,
        -6.4020114808279,
        4.1610688197241865, //
        67.23177671153368,
    ],
    bias: 1.402063522617941,
};
