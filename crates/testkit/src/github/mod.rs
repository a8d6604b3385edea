//! GitHub side of the testkit: simulated runners driving the `scaleset` emulator.
