//! Which Gitea instance a delivery comes from, and whether it is the one a group uses (pure).
//!
//! A `workflow_job` payload names its instance only through its repository's `html_url`
//! (`services/webhook/notifier.go` `WorkflowJobStatusUpdate` builds `repository` with
//! `convert.ToRepo`, whose `HTMLURL` is `Repository.HTMLURL` in `models/repo/repo.go`): the
//! instance's public URL, its sub-path (`setting.AppSubURL`), then `/owner/name`
//! (`Repository.Link`). The host part comes from `modules/httplib/url.go` `MakeAbsoluteURL`:
//! `ROOT_URL`, or with `PUBLIC_URL_DETECTION = auto` (the default from Gitea 1.26) the `Host` of
//! the HTTP request during which the job changed, if any. Pushes and the job emitter run from
//! queues with no request, so their `queued` deliveries carry `ROOT_URL`; a runner's own calls
//! (`in_progress`, `completed`) carry the host the runner dialled, which is the group's `url`.
//! So deliveries match a group whose `url` is the address Gitea calls itself by.

use url::Url;

use crate::scope::same_name;

/// Whether `html_url`, the page of repository `owner/repo` as a delivery names it, lies on the
/// instance a group reaches at `group_url`: same scheme, host and port (default ports
/// implied), and the path is the group URL's sub-path followed by `/owner/repo`.
///
/// The whole path is compared, not a prefix, so two instances on one host under different
/// sub-paths (`https://h/a`, `https://h/b`) are told apart, and one at the root does not claim
/// the other's pages. Owner and repository compare as Gitea compares them.
pub(crate) fn on_instance(group_url: &str, html_url: &str, owner: &str, repo: &str) -> bool {
    let (Ok(group), Ok(page)) = (Url::parse(group_url.trim()), Url::parse(html_url.trim())) else {
        return false;
    };
    let same_origin = group.scheme() == page.scheme()
        && group.host() == page.host()
        && group.port_or_known_default() == page.port_or_known_default();
    if !same_origin {
        return false;
    }
    let sub_path = group.path().trim_end_matches('/');
    let Some(rest) = page
        .path()
        .strip_prefix(sub_path)
        .and_then(|r| r.strip_prefix('/'))
    else {
        return false;
    };
    match rest.trim_end_matches('/').split_once('/') {
        Some((o, r)) => same_name(o, owner) && same_name(r, repo),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn on(group: &str, page: &str) -> bool {
        on_instance(group, page, "acme", "app")
    }

    #[test]
    fn the_same_origin_and_the_repositorys_own_path() {
        assert!(on("https://git.example.com", "https://git.example.com/acme/app"));
        assert!(on("https://git.example.com/", "https://git.example.com/acme/app"));
        assert!(on(
            " https://Git.Example.com:443 ",
            "https://git.example.com/Acme/App"
        ));
        assert!(on("http://127.0.0.1:3000", "http://127.0.0.1:3000/acme/app"));
        assert!(on("http://[::1]:3000", "http://[::1]:3000/acme/app"));
    }

    #[test]
    fn another_scheme_host_or_port_is_another_instance() {
        let page = "https://git.example.com/acme/app";
        for other in [
            "http://git.example.com",
            "https://git.example.org",
            "https://git.example.com:8443",
            "https://example.com",
        ] {
            assert!(!on(other, page), "{other}");
        }
        assert!(!on("http://127.0.0.1:3000", "http://127.0.0.1:3001/acme/app"));
    }

    /// `ROOT_URL = https://h/git/` gives `AppSubURL = /git` and pages `https://h/git/owner/name`.
    #[test]
    fn sub_paths_must_agree() {
        let page = "https://h.example/git/acme/app";
        assert!(on("https://h.example/git", page));
        assert!(on("https://h.example/git/", page));
        assert!(
            !on("https://h.example", page),
            "the root is not the /git instance"
        );
        assert!(!on("https://h.example/gitea", page));
        assert!(!on("https://h.example/gi", page));
        assert!(!on("https://h.example/git", "https://h.example/acme/app"));
    }

    #[test]
    fn the_path_must_name_the_deliverys_repository() {
        assert!(!on("https://h.example", "https://h.example/acme/web"));
        assert!(!on("https://h.example", "https://h.example/other/app"));
        assert!(!on("https://h.example", "https://h.example/acme"));
        assert!(!on("https://h.example", "https://h.example/acme/app/extra"));
    }

    #[test]
    fn no_url_or_a_broken_one_is_no_instance() {
        assert!(!on("https://h.example", ""));
        assert!(!on("https://h.example", "/acme/app"));
        assert!(!on("https://h.example", "not a url"));
        assert!(!on("", "https://h.example/acme/app"));
    }
}
