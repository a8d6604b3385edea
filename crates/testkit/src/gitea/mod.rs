//! A fake Gitea (1.25/1.26 routes and JSON shapes) with simulated act_runner behaviour.
