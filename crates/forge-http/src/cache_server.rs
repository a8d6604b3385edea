//! The shared Actions cache server (`spec.cache`) of Gitea and Forgejo groups, as far as the two
//! runners agree: core builds the objects ([`forgerunner_core::cache_server`]), this builds
//! their [`CacheServer`] from what differs, a [`CacheFlavour`] each forge states with its sources.
//!
//! Both runners descend from act_runner and ship its `cache-server` subcommand, run from the
//! runners' own image as `<binary> cache-server --config <file> --dir /cache [--host <service>]
//! --port <port>`, the flags winning over the config's `cache.dir/host/port` (gitea-runner
//! v1.0.8 and forgejo-runner 12.8, `internal/app/cmd/cmd.go` and `cache-server.go`). Neither
//! takes the shared secret other than from its config file, where the server finds it under
//! `cache:`; the runners find `enabled`, `external_server` and the same secret under `cache:` of
//! theirs. The secret is thus in the mounted files only, never an argument.

use forgerunner_core::cache_server::{CACHE_DIR, CacheServer, SERVER_CONFIG_PATH};
use forgerunner_core::forge::SecretValue;

/// What one runner's cache server and cache config do differently.
#[derive(Clone, Copy, Debug)]
pub struct CacheFlavour {
    /// The runner's name, in the server config's header comment.
    pub runner: &'static str,
    /// The port the server listens on, and the cache Service's port.
    pub port: i32,
    /// The shared secret's key under `cache:`, in both config files.
    pub secret_key: &'static str,
    /// Whether the server gets `--host <service>`: it builds the URLs it hands jobs from it.
    pub host_flag: bool,
    /// Whether the runners' `external_server` ends with `/`.
    pub trailing_slash: bool,
}

impl CacheFlavour {
    /// The URL the runners reach the server at, through the Service at `service_host`.
    pub fn url(&self, service_host: &str) -> String {
        let slash = if self.trailing_slash { "/" } else { "" };
        format!("http://{service_host}:{}{slash}", self.port)
    }

    /// The cache server running `binary` of `image`, reachable at `service_host`, sharing
    /// `secret` with the runners.
    pub fn server(
        &self,
        image: String,
        binary: &str,
        service_host: &str,
        secret: &SecretValue,
    ) -> CacheServer {
        let mut args = ["cache-server", "--config", SERVER_CONFIG_PATH, "--dir", CACHE_DIR]
            .map(str::to_owned)
            .to_vec();
        if self.host_flag {
            args.extend(["--host".to_owned(), service_host.to_owned()]);
        }
        args.extend(["--port".to_owned(), self.port.to_string()]);
        let url = self.url(service_host);
        CacheServer {
            image,
            command: vec![binary.to_owned()],
            args,
            port: self.port,
            server_config: self.server_config(secret),
            runner_config: self.runner_config(&url, secret),
            url,
        }
    }

    /// The server's config file: the shared secret.
    pub fn server_config(&self, secret: &SecretValue) -> SecretValue {
        SecretValue::new(format!(
            "# Written by forgerunner for spec.cache: {} cache-server's config.\n\
             cache:\n  {}: \"{}\"\n",
            self.runner,
            self.secret_key,
            secret.expose()
        ))
    }

    /// A runner's config file: where the cache server is, and the shared secret.
    pub fn runner_config(&self, url: &str, secret: &SecretValue) -> SecretValue {
        SecretValue::new(format!(
            "# Written by forgerunner for spec.cache: the runner's config.\n\
             cache:\n  enabled: true\n  external_server: \"{url}\"\n  {}: \"{}\"\n",
            self.secret_key,
            secret.expose()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FLAVOUR: CacheFlavour = CacheFlavour {
        runner: "some-runner",
        port: 1234,
        secret_key: "the_secret",
        host_flag: true,
        trailing_slash: true,
    };

    #[test]
    fn the_flavour_sets_port_host_flag_url_and_secret_key() {
        let secret = SecretValue::new("s3cr3t");
        let s = FLAVOUR.server("img:1".into(), "bin", "svc.ns", &secret);
        assert_eq!(
            (s.image.as_str(), s.command.as_slice()),
            ("img:1", ["bin".to_owned()].as_slice())
        );
        assert_eq!(
            s.args,
            [
                "cache-server",
                "--config",
                SERVER_CONFIG_PATH,
                "--dir",
                CACHE_DIR,
                "--host",
                "svc.ns",
                "--port",
                "1234"
            ]
        );
        assert_eq!((s.port, s.url.as_str()), (1234, "http://svc.ns:1234/"));
        assert!(
            !s.args.iter().any(|a| a.contains("s3cr3t")),
            "the secret is never an argument"
        );
        assert_eq!(
            s.server_config.expose(),
            "# Written by forgerunner for spec.cache: some-runner cache-server's config.\n\
             cache:\n  the_secret: \"s3cr3t\"\n"
        );
        assert_eq!(
            s.runner_config.expose(),
            "# Written by forgerunner for spec.cache: the runner's config.\n\
             cache:\n  enabled: true\n  external_server: \"http://svc.ns:1234/\"\n  the_secret: \"s3cr3t\"\n"
        );

        let plain = CacheFlavour {
            host_flag: false,
            trailing_slash: false,
            ..FLAVOUR
        };
        let s = plain.server("img:1".into(), "bin", "svc.ns", &secret);
        assert!(!s.args.iter().any(|a| a == "--host"));
        assert_eq!(s.url, "http://svc.ns:1234");
        assert!(
            s.runner_config
                .expose()
                .contains("external_server: \"http://svc.ns:1234\"\n")
        );
    }
}
