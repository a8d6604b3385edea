//! The sandbox: forgerunner working end to end on a machine with no cluster and no forge.
//!
//! Starts the fake API server with the cluster simulator, the GitHub emulator, the Gitea fake
//! and the Forgejo fake, installs the CRD, creates one RunnerGroup per forge, runs the real
//! operator in a child process, queues a burst of jobs on each forge and shows live what
//! happens. Then a Gitea group with a shared cache (`spec.cache`) and runner classes
//! (`spec.classes`) runs two cached jobs, the second after the first, and one job per class.
//! Exits 0 only when every job completed, nothing leaked, the second cached job hit what the
//! first saved and each sized job got a runner of its class.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use forgerunner_sandbox::bench::stages;
use forgerunner_sandbox::world::cache_classes::run_demo;
use forgerunner_sandbox::world::github_work::GithubJobPlay;
use forgerunner_sandbox::world::groups::GroupSize;
use forgerunner_sandbox::world::node_loss::LostRunner;
use forgerunner_sandbox::world::operator::{
    OperatorCommand, OperatorProcess, OperatorSettings, run_embedded_operator_if_asked,
};
use forgerunner_sandbox::world::watch::JobWatch;
use forgerunner_sandbox::world::workload::{Progress, Queued, percentile_ms, queue_to_runner_latencies};
use forgerunner_sandbox::world::{World, WorldOptions, block_on_main, wait_until};
use forgerunner_testkit::github::ReassignPolicy;

const NAMESPACE: &str = "sandbox";
const GITHUB_GROUP: &str = "gh-linux";
const GITEA_GROUP: &str = "gitea-linux";
const GITEA_LABEL: &str = "ubuntu-latest";
const FORGEJO_GROUP: &str = "forgejo-linux";
const FORGEJO_LABEL: &str = "docker";
/// The Gitea group with `spec.cache` and `spec.classes`.
const CACHE_GROUP: &str = "gitea-cached";
/// Seconds between Gitea and Forgejo polls (their default).
const POLL_SECONDS: u32 = 5;
const WEBHOOK_SECRET: &str = "sandbox-webhook-secret";
/// `spec.rerun.maxPerHour` of the GitHub group in the node-loss example.
const RERUNS_PER_HOUR: u32 = 5;
/// The GitHub group's image in the day-two demo: a release behind the one the downloads fake
/// serves, so `RunnerOutdated` turns True.
const OUTDATED_RUNNER_IMAGE: &str = "ghcr.io/actions/actions-runner:2.330.0";
/// How long each step of the node-loss example may take.
const DEMO_WAIT: Duration = Duration::from_secs(30);

/// See forgerunner work end to end on GitHub, Gitea and Forgejo fakes, no cluster needed.
#[derive(Parser, Debug)]
#[command(name = "sandbox", version)]
struct Args {
    /// Jobs queued on GitHub.
    #[arg(long, default_value_t = 20)]
    github_jobs: usize,
    /// Jobs queued on Gitea.
    #[arg(long, default_value_t = 20)]
    gitea_jobs: usize,
    /// Jobs queued on Forgejo.
    #[arg(long, default_value_t = 20)]
    forgejo_jobs: usize,
    /// maxRunners of each RunnerGroup.
    #[arg(long, default_value_t = 5)]
    max_runners: u32,
    /// How long a simulated job runs, in milliseconds.
    #[arg(long, default_value_t = 400)]
    work_ms: u64,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 55)]
    timeout_secs: u64,
    /// Deliver Gitea `workflow_job` webhooks to the operator (otherwise polling only; Forgejo
    /// always polls).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    webhook: bool,
    /// How long a runner pod takes from creation to a running container, in milliseconds
    /// (image pull and start).
    #[arg(long, default_value_t = 50)]
    pod_start_ms: u64,
    /// Cancel a GitHub job assignment no runner took within this many milliseconds and queue
    /// the job again, up to 3 times, as GitHub does; 0 leaves assignments standing.
    #[arg(long, default_value_t = 0)]
    github_reassign_after_ms: u64,
    /// Keep everything running afterwards and print the kubeconfig for kubectl.
    #[arg(long)]
    keep: bool,
}

fn main() -> ExitCode {
    if let Some(code) = run_embedded_operator_if_asked() {
        return code;
    }
    let args = Args::parse();
    block_on_main(async {
        match sandbox(args).await {
            Ok(true) => ExitCode::SUCCESS,
            Ok(false) => ExitCode::FAILURE,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        }
    })
}

/// One group's row in the live view and the summary.
struct Row {
    group: &'static str,
    forge: &'static str,
    queued: Vec<Queued>,
    progress: Progress,
    drained_at: Option<Instant>,
}

async fn sandbox(args: Args) -> anyhow::Result<bool> {
    let started = Instant::now();
    println!("starting the fake cluster, the GitHub emulator, the Gitea fake and the Forgejo fake …");
    let world = World::start(WorldOptions {
        work_time: Duration::from_millis(args.work_ms),
        pod_start_delay: Duration::from_millis(args.pod_start_ms),
        github_reassign: (args.github_reassign_after_ms > 0).then(|| {
            ReassignPolicy::github(
                Duration::from_millis(args.github_reassign_after_ms),
                Duration::from_millis(args.github_reassign_after_ms / 3),
            )
        }),
        // Only the day-two demo re-runs a job; the burst alone talks to the emulator directly.
        github_rest: args.keep,
        ..WorldOptions::default()
    })
    .await?;
    world.create_namespace(NAMESPACE).await?;
    let watch = JobWatch::start(world.client.clone(), NAMESPACE);

    let mut operator = OperatorProcess::spawn(
        &OperatorCommand::embedded()?,
        world.kubeconfig(),
        &OperatorSettings::default(),
    )?;
    let http_addr = operator.http_addr().await?;
    let metrics_addr = operator.metrics_addr().await?;
    println!(
        "operator started (pid {}, http {http_addr}, metrics {metrics_addr})",
        operator.pid(),
    );

    let size = GroupSize::up_to(args.max_runners);
    world.add_github_group(NAMESPACE, GITHUB_GROUP, &size).await?;
    let hook = args.webhook.then_some(WEBHOOK_SECRET);
    world
        .add_gitea_group(NAMESPACE, GITEA_GROUP, &[GITEA_LABEL], &size, POLL_SECONDS, hook)
        .await?;
    world
        .add_forgejo_group(NAMESPACE, FORGEJO_GROUP, &[FORGEJO_LABEL], &size, POLL_SECONDS)
        .await?;
    world
        .add_gitea_cache_group(NAMESPACE, CACHE_GROUP, &GroupSize::up_to(3), POLL_SECONDS, hook)
        .await?;
    if let (true, Some(fake)) = (args.webhook, &world.gitea) {
        fake.set_webhook(&format!("http://{http_addr}/webhooks/gitea"), WEBHOOK_SECRET);
    }
    let scale_set = world
        .github_scale_set(GITHUB_GROUP, Duration::from_secs(20))
        .await?;
    // Jobs queued before a group's first pass count from first seen, not from their queue time.
    for group in [GITEA_GROUP, FORGEJO_GROUP, CACHE_GROUP] {
        world
            .wait_first_pass(NAMESPACE, group, Duration::from_secs(20))
            .await?;
    }
    println!(
        "RunnerGroups {GITHUB_GROUP} (github), {GITEA_GROUP} (gitea), {FORGEJO_GROUP} (forgejo) and \
         {CACHE_GROUP} (gitea, spec.cache and spec.classes) created; queueing jobs\n"
    );

    let mut rows = [
        Row {
            group: GITHUB_GROUP,
            forge: "github",
            queued: Vec::new(),
            progress: Progress::default(),
            drained_at: None,
        },
        Row {
            group: GITEA_GROUP,
            forge: "gitea",
            queued: Vec::new(),
            progress: Progress::default(),
            drained_at: None,
        },
        Row {
            group: FORGEJO_GROUP,
            forge: "forgejo",
            queued: Vec::new(),
            progress: Progress::default(),
            drained_at: None,
        },
    ];
    let burst_start = Instant::now();
    for _ in 0..args.github_jobs {
        rows[0]
            .queued
            .push(world.queue_github_job(scale_set, GITHUB_GROUP)?);
    }
    for _ in 0..args.gitea_jobs {
        rows[1].queued.push(world.queue_gitea_job(&[GITEA_LABEL])?);
    }
    for _ in 0..args.forgejo_jobs {
        rows[2].queued.push(world.queue_forgejo_job(&[FORGEJO_LABEL])?);
    }

    let deadline = started + Duration::from_secs(args.timeout_secs);
    let live = std::io::stdout().is_terminal();
    let mut drawn = 0usize;
    let mut last_plain = Instant::now();
    let finished = loop {
        rows[0].progress = world.github_progress(scale_set);
        rows[1].progress = world.gitea_progress(&[GITEA_LABEL]);
        rows[2].progress = world.forgejo_progress(&[FORGEJO_LABEL]);
        let left = world
            .runner_jobs(NAMESPACE, None)
            .await
            .map(|j| j.len())
            .unwrap_or(usize::MAX);
        for row in &mut rows {
            if row.drained_at.is_none() && row.progress.all_done() {
                row.drained_at = Some(Instant::now());
            }
        }
        let lines = view(&rows, &watch, args.max_runners, started.elapsed(), left);
        if live {
            if drawn > 0 {
                print!("\x1b[{drawn}A");
            }
            for line in &lines {
                println!("\x1b[2K{line}");
            }
            drawn = lines.len();
        } else if last_plain.elapsed() >= Duration::from_secs(2) {
            println!("{}", lines.join("\n"));
            last_plain = Instant::now();
        }
        let clean = rows
            .iter()
            .all(|r| r.progress.all_done() && r.progress.registered_runners == 0)
            && left == 0;
        if clean {
            break true;
        }
        if Instant::now() >= deadline || operator.exit_status().is_some() {
            break false;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };

    println!();
    let mut ok = finished;
    for row in &rows {
        let tally = watch.group(row.group);
        let latencies = queue_to_runner_latencies(&row.queued, &tally);
        let drain = row
            .drained_at
            .map(|t| t.duration_since(burst_start).as_secs_f64());
        let over = tally.peak_active > args.max_runners as usize;
        ok &= !over;
        println!(
            "{:<14} {:<7} jobs {:>3}/{:<3} runner Jobs created {:>3}  peak {:>2}/{}  queue→runner p50 {:>6.1} ms  p95 {:>6.1} ms  drained in {}",
            row.group,
            row.forge,
            row.progress.done,
            row.progress.total,
            tally.created.len(),
            tally.peak_active,
            args.max_runners,
            percentile_ms(&latencies, 50.0),
            percentile_ms(&latencies, 95.0),
            drain.map_or("—".to_owned(), |s| format!("{s:.1} s")),
        );
    }
    let metrics = stages::scrape(&operator).await;
    println!("\nLatency per stage, as the operator measured it (its /metrics histograms):");
    for line in stages::table(&metrics, &[GITHUB_GROUP, GITEA_GROUP, FORGEJO_GROUP]) {
        println!("  {line}");
    }
    println!("\nShared cache and runner classes ({CACHE_GROUP}, gitea):");
    match run_demo(&world, &watch, NAMESPACE, CACHE_GROUP, DEMO_WAIT).await {
        Ok(report) => {
            for line in &report.lines {
                println!("  {line}");
            }
            if !report.ok {
                println!(
                    "  FAILED: the second cached job should hit what the first saved, each sized job get its class"
                );
            }
            ok &= report.ok;
        }
        Err(e) => {
            println!("  FAILED: {e}");
            ok = false;
        }
    }
    if ok {
        println!(
            "\nOK: every job completed, never more than {} runners per group, nothing leaked; the second \
             cached job hit what the first saved, each sized job got its class.",
            args.max_runners
        );
    } else {
        explain_failure(&world, &rows, &mut operator).await;
    }
    if args.keep {
        if let Err(e) = day_two(&world).await {
            println!("could not set up the day-two examples: {e}");
        }
        let lost = match node_loss_demo(&world, scale_set).await {
            Ok(lost) => Some(lost),
            Err(e) => {
                println!("could not set up the node-loss example: {e}");
                None
            }
        };
        println!("\nEverything keeps running. Explore with:");
        println!("  export KUBECONFIG={}", world.kubeconfig().display());
        println!("  kubectl get rg,jobs,pods -n {NAMESPACE}");
        println!(
            "  kubectl get rg -n {NAMESPACE} -o wide                       # the schedule window and its next change"
        );
        println!("  kubectl get events -n {NAMESPACE} --field-selector reason=UnmatchedJob");
        println!(
            "  kubectl get rg {GITEA_GROUP} -n {NAMESPACE} -o jsonpath='{{.status.conditions[?(@.type==\"QueueStalled\")]}}'"
        );
        if let Some(lost) = &lost {
            println!(
                "  kubectl get events -n {NAMESPACE} --field-selector reason=JobRerun       # the re-run of job {}",
                lost.job.0
            );
            println!(
                "  kubectl get events -n {NAMESPACE} --field-selector involvedObject.name={}   # NodeNotReady, TaintManagerEviction",
                lost.pod
            );
            println!(
                "  kubectl get pod {} -n {NAMESPACE} -o jsonpath='{{.status.conditions[?(@.type==\"DisruptionTarget\")]}}'   # until PodGC removes it",
                lost.pod
            );
        }
        println!(
            "  kubectl get rg {GITHUB_GROUP} -n {NAMESPACE} -o jsonpath='{{.status.conditions[?(@.type==\"RunnerOutdated\")]}}'"
        );
        println!(
            "  kubectl get deploy,svc,pvc,networkpolicy -n {NAMESPACE} -l forgerunner.dev/cache-of={CACHE_GROUP}   # the shared cache"
        );
        println!(
            "  kubectl get deploy {CACHE_GROUP}-actions-cache -n {NAMESPACE} -o jsonpath='{{.metadata.ownerReferences}}'   # owned by the group"
        );
        println!("  kubectl get rg {CACHE_GROUP} -n {NAMESPACE} -o jsonpath='{{.status.cache}}'");
        println!(
            "  curl -s http://{metrics_addr}/metrics | grep -E 'oldest_waiting|unmatched|min_runners|jobs_rerun|runner_version'"
        );
        println!("Press Ctrl-C to stop.");
        let _ = tokio::signal::ctrl_c().await;
    }
    operator.stop(Duration::from_secs(10));
    Ok(ok)
}

/// With `--keep`, after the burst: a warm pool by the calendar on the Forgejo group (a window
/// open from the current minute for two hours), and on Gitea a job whose `runs-on` no group
/// matches, with a short `stalledJobSeconds` so the watchdog names it within seconds.
async fn day_two(world: &World) -> Result<(), Box<dyn std::error::Error>> {
    use kube::api::{Api, Patch, PatchParams};
    let groups: Api<forgerunner_core::RunnerGroup> = Api::namespaced(world.client.clone(), NAMESPACE);
    let now = jiff::Timestamp::now().to_zoned(jiff::tz::TimeZone::UTC);
    let end = &now + jiff::SignedDuration::from_hours(2);
    let window = serde_json::json!({"spec": {"schedules": [{
        "name": "demo-window",
        "start": format!("{} {} * * *", now.minute(), now.hour()),
        "end": format!("{} {} * * *", end.minute(), end.hour()),
        "timeZone": "UTC",
        "minRunners": 1,
    }]}});
    groups
        .patch(FORGEJO_GROUP, &PatchParams::default(), &Patch::Merge(&window))
        .await?;
    let quick = serde_json::json!({"spec": {"stalledJobSeconds": 5}});
    groups
        .patch(GITEA_GROUP, &PatchParams::default(), &Patch::Merge(&quick))
        .await?;
    world.queue_gitea_job(&["ubuntu-latset"])?;
    // GitHub serves a newer runner release than this image pins (the downloads fake serves
    // DEFAULT_SERVED): the group's RunnerOutdated condition names the image to update.
    let pinned = serde_json::json!({"spec": {"image": OUTDATED_RUNNER_IMAGE}});
    groups
        .patch(GITHUB_GROUP, &PatchParams::default(), &Patch::Merge(&pinned))
        .await?;
    println!(
        "\nDay two: {FORGEJO_GROUP} keeps 1 warm runner in window demo-window (until {} UTC); a Gitea job \
         asks for runs-on: [ubuntu-latset], which no group matches; {GITHUB_GROUP} runs \
         {OUTDATED_RUNNER_IMAGE} while GitHub serves {}",
        end.strftime("%H:%M"),
        forgerunner_testkit::github::runner_downloads::DEFAULT_SERVED
    );
    Ok(())
}

/// With `--keep`, after the day-two examples: `spec.rerun` on the GitHub group, one job its
/// runner keeps working on, and once the operator knows which job that is, the runner's node
/// stops answering (the simulator plays the control plane: `DisruptionTarget` by the taint
/// manager, a delete no kubelet confirms). Waits for the operator's `JobRerun` Event and says
/// how long it took.
async fn node_loss_demo(
    world: &World,
    scale_set: forgerunner_testkit::github::ScaleSetId,
) -> Result<LostRunner, Box<dyn std::error::Error>> {
    use k8s_openapi::api::events::v1::Event;
    use kube::api::{Api, ListParams};
    world
        .set_rerun(NAMESPACE, GITHUB_GROUP, Some(RERUNS_PER_HOUR))
        .await?;
    world.github_play_next(GithubJobPlay::UntilKilled)?;
    world.queue_github_job(scale_set, GITHUB_GROUP)?;
    let lost = std::sync::Mutex::new(None);
    wait_until(
        DEMO_WAIT,
        "a busy GitHub runner whose job the operator knows",
        || async {
            let found = world
                .lose_busy_github_runner(NAMESPACE, scale_set)
                .await
                .ok()
                .flatten();
            let done = found.is_some();
            *lost.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = found;
            done
        },
    )
    .await?;
    let lost_at = Instant::now();
    let lost = lost
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .ok_or("no runner lost")?;
    println!(
        "Day two: the node under GitHub runner {} (pod {}) stopped answering while it ran job {}; \
         {GITHUB_GROUP} has spec.rerun.maxPerHour: {RERUNS_PER_HOUR}",
        lost.runner, lost.pod, lost.job.0
    );
    let events: Api<Event> = Api::namespaced(world.client.clone(), NAMESPACE);
    let note = std::sync::Mutex::new(None);
    let seen = wait_until(DEMO_WAIT, "the JobRerun Event", || async {
        let list = events.list(&ListParams::default()).await.map(|l| l.items);
        let found = list.unwrap_or_default().into_iter().find_map(|e| {
            let ours = e.reason.as_deref() == Some("JobRerun")
                && e.note.as_deref().is_some_and(|n| n.contains(&lost.runner));
            ours.then_some(e.note).flatten()
        });
        let done = found.is_some();
        *note.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = found;
        done
    })
    .await;
    match seen {
        Ok(()) => println!(
            "  JobRerun Event {:.1} s after the node loss: {}",
            lost_at.elapsed().as_secs_f64(),
            note.into_inner()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .unwrap_or_default()
        ),
        Err(_) => println!(
            "  no JobRerun Event within {} s; see kubectl get events -n {NAMESPACE}",
            DEMO_WAIT.as_secs()
        ),
    }
    Ok(lost)
}

fn view(rows: &[Row], watch: &JobWatch, max: u32, elapsed: Duration, left: usize) -> Vec<String> {
    let mut lines = vec![
        format!(
            "forgerunner sandbox  {:>5.1} s   runner Jobs in the cluster: {left}",
            elapsed.as_secs_f64()
        ),
        format!(
            "{:<14} {:<7} {:>7} {:>8} {:>10} {:>10} {:>9}",
            "GROUP", "FORGE", "QUEUED", "RUNNING", "DONE", "RUNNERS", "PEAK/MAX"
        ),
    ];
    for row in rows {
        let tally = watch.group(row.group);
        lines.push(format!(
            "{:<14} {:<7} {:>7} {:>8} {:>10} {:>10} {:>9}",
            row.group,
            row.forge,
            row.progress.queued,
            row.progress.running,
            format!("{}/{}", row.progress.done, row.progress.total),
            tally.active.len(),
            format!("{}/{}", tally.peak_active, max),
        ));
    }
    lines
}

async fn explain_failure(world: &World, rows: &[Row], operator: &mut OperatorProcess) {
    println!("\nFAILED:");
    if let Some(status) = operator.exit_status() {
        println!("- the operator exited: {status}");
    }
    for row in rows {
        let p = row.progress;
        if !p.all_done() {
            println!(
                "- {}: {} of {} jobs done ({} queued, {} running)",
                row.group, p.done, p.total, p.queued, p.running
            );
        }
        if p.registered_runners > 0 {
            println!(
                "- {}: {} runners still registered at the forge",
                row.group, p.registered_runners
            );
        }
        if let Ok(group) = world.group(NAMESPACE, row.group).await {
            for c in group.status.iter().flat_map(|s| s.conditions.iter()) {
                println!(
                    "  {} {}={} {}: {}",
                    row.group, c.type_, c.status, c.reason, c.message
                );
            }
        }
    }
    if let Ok(jobs) = world.runner_jobs(NAMESPACE, None).await
        && !jobs.is_empty()
    {
        println!("- {} runner Jobs left in the cluster", jobs.len());
    }
    println!("last operator output:");
    for line in operator.output().iter().rev().take(20).rev() {
        println!("  {line}");
    }
}
