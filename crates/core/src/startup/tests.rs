use super::*;

fn pod(status: serde_json::Value) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "g-abcde-x1"},
        "status": status,
    }))
    .expect("pod")
}

fn waiting(container: &str, reason: &str, message: &str) -> serde_json::Value {
    serde_json::json!({
        "name": container, "image": "i", "imageID": "", "ready": false, "restartCount": 0,
        "state": {"waiting": {"reason": reason, "message": message}},
    })
}

const TIMEOUT: Duration = Duration::from_secs(300);

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

#[test]
fn image_pull_backoff_fails_at_once_with_kubernetes_words() {
    let p = pod(serde_json::json!({"phase": "Pending", "containerStatuses": [
        waiting("runner", "ImagePullBackOff", "Back-off pulling image \"nope:1\"")]}));
    let s = classify(Some(&p), None, secs(3), TIMEOUT).expect("stuck");
    assert_eq!(s.cause, StartupFailure::ImagePullFailed);
    assert!(
        s.message.contains("Back-off pulling image \"nope:1\""),
        "{}",
        s.message
    );
    assert!(s.message.contains("runner"), "{}", s.message);
}

#[test]
fn first_pull_error_is_given_the_kubelet_retry() {
    let p = pod(serde_json::json!({"phase": "Pending", "containerStatuses": [
        waiting("runner", "ErrImagePull", "not found")]}));
    assert_eq!(classify(Some(&p), None, secs(3), TIMEOUT), None);
}

#[test]
fn init_container_pull_failure_counts() {
    let p = pod(serde_json::json!({"phase": "Pending", "initContainerStatuses": [
        waiting("register", "ImagePullBackOff", "Back-off")]}));
    assert_eq!(
        classify(Some(&p), None, secs(1), TIMEOUT).map(|s| s.cause),
        Some(StartupFailure::ImagePullFailed)
    );
}

#[test]
fn config_error_waits_for_its_grace() {
    let p = pod(serde_json::json!({"phase": "Pending", "containerStatuses": [
        waiting("runner", "CreateContainerConfigError", "secret \"g-abcde\" not found")]}));
    assert_eq!(
        classify(Some(&p), None, secs(5), TIMEOUT),
        None,
        "the Secret may be on its way"
    );
    let s = classify(Some(&p), None, CONFIG_ERROR_GRACE, TIMEOUT).expect("stuck");
    assert_eq!(s.cause, StartupFailure::ContainerConfigError);
    assert_eq!(
        classify(Some(&p), None, secs(10), secs(10)).map(|s| s.cause),
        Some(StartupFailure::ContainerConfigError),
        "a startup timeout shorter than the grace wins"
    );
}

#[test]
fn unschedulable_waits_for_the_startup_timeout() {
    let p = pod(serde_json::json!({"phase": "Pending", "conditions": [{
        "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
        "message": "0/1 nodes are available: 1 Insufficient cpu."}]}));
    assert_eq!(
        classify(Some(&p), None, secs(299), TIMEOUT),
        None,
        "an autoscaler may add a node"
    );
    let s = classify(Some(&p), None, TIMEOUT, TIMEOUT).expect("stuck");
    assert_eq!(s.cause, StartupFailure::Unschedulable);
    assert!(s.message.contains("Insufficient cpu"));
}

#[test]
fn slow_pull_times_out_naming_what_it_waits_for() {
    let p = pod(serde_json::json!({"phase": "Pending", "containerStatuses": [
        waiting("runner", "ContainerCreating", "")]}));
    assert_eq!(classify(Some(&p), None, secs(200), TIMEOUT), None);
    let s = classify(Some(&p), None, secs(301), TIMEOUT).expect("stuck");
    assert_eq!(s.cause, StartupFailure::StartupTimeout);
    assert!(s.message.contains("ContainerCreating"), "{}", s.message);
}

#[test]
fn failed_create_events_name_quota_or_admission() {
    let quota = "Error creating: pods \"g-x\" is forbidden: exceeded quota: q, requested: pods=1, used: pods=2, limited: pods=2";
    let s = classify(None, Some(quota), secs(2), TIMEOUT).expect("stuck");
    assert_eq!(s.cause, StartupFailure::QuotaExceeded);
    assert!(s.message.contains("limited: pods=2"));
    let psa =
        "Error creating: pods \"g-x\" is forbidden: violates PodSecurity \"restricted:latest\": privileged";
    assert_eq!(
        classify(None, Some(psa), secs(2), TIMEOUT).map(|s| s.cause),
        Some(StartupFailure::PodRejected)
    );
}

/// The Job controller's `FailedCreate` message (`Error creating: %v`,
/// `pkg/controller/controller_utils.go` `RealPodControl.createPods`) around the ServiceAccount
/// admission plugin's 403 (`plugin/pkg/admission/serviceaccount/admission.go` `Plugin.Admit`:
/// `admission.NewForbidden(a, fmt.Errorf("error looking up service account %s/%s: %w", ...))`
/// over `getServiceAccount`'s `errors.NewNotFound(api.Resource("serviceaccount"), name)`; the
/// pod name is the Job's `generateName`, `admission.extractResourceName`).
const SA_MISSING: &str = "Error creating: pods \"hooks-abcde-\" is forbidden: error looking up service \
     account ci/hooks-runner: serviceaccount \"hooks-runner\" not found";

#[test]
fn a_missing_service_account_is_its_own_cause_naming_the_account() {
    let s = classify(None, Some(SA_MISSING), secs(2), TIMEOUT).expect("stuck");
    assert_eq!(s.cause, StartupFailure::ServiceAccountMissing);
    assert!(s.message.contains("hooks-runner"), "{}", s.message);
    assert_eq!(
        missing_service_account(SA_MISSING),
        Some(MissingServiceAccount {
            namespace: "ci".into(),
            name: "hooks-runner".into(),
        })
    );
}

#[test]
fn other_service_account_lookup_failures_stay_pod_rejected() {
    // getServiceAccount returns other errors as they are (a timed-out GET): not a missing account.
    let timeout = "Error creating: pods \"hooks-abcde-\" is forbidden: error looking up service account \
         ci/hooks-runner: the server was unable to return a response in the time allotted";
    assert_eq!(missing_service_account(timeout), None);
    assert_eq!(
        classify(None, Some(timeout), secs(2), TIMEOUT).map(|s| s.cause),
        Some(StartupFailure::PodRejected)
    );
    // The account of the message must be the one not found.
    let other = "Error creating: pods \"x-\" is forbidden: error looking up service account ci/a: \
         serviceaccount \"b\" not found";
    assert_eq!(missing_service_account(other), None);
}

#[test]
fn no_pod_and_no_event_times_out() {
    assert_eq!(classify(None, None, secs(10), TIMEOUT), None);
    assert_eq!(
        classify(None, None, TIMEOUT, TIMEOUT).map(|s| s.cause),
        Some(StartupFailure::StartupTimeout)
    );
}

#[test]
fn long_messages_are_cut() {
    let long = "x".repeat(5000);
    let s = classify(None, Some(&long), secs(1), TIMEOUT).expect("stuck");
    assert!(s.message.chars().count() <= MAX_QUOTED_MESSAGE + 1);
}

#[test]
fn reasons_round_trip() {
    for f in [
        StartupFailure::ImagePullFailed,
        StartupFailure::Unschedulable,
        StartupFailure::QuotaExceeded,
        StartupFailure::PodRejected,
        StartupFailure::ServiceAccountMissing,
        StartupFailure::ContainerConfigError,
        StartupFailure::StartupTimeout,
    ] {
        assert_eq!(StartupFailure::parse(f.as_str()), Some(f));
        assert!(!f.hint().is_empty());
    }
    assert_eq!(StartupFailure::parse("Healthy"), None);
}

#[test]
fn backoff_spares_one_off_failures_and_caps() {
    assert_eq!(creation_backoff(0), Duration::ZERO);
    assert_eq!(creation_backoff(1), Duration::ZERO);
    assert_eq!(creation_backoff(2), secs(5));
    assert_eq!(creation_backoff(3), secs(10));
    assert_eq!(creation_backoff(7), secs(160));
    assert_eq!(creation_backoff(8), secs(300));
    assert_eq!(creation_backoff(u32::MAX), secs(300));
}
