//! Finds the kubectl commands of a Markdown document: every line of a shell code block
//! (```` ```sh ````, `bash`, `shell`, `console` or no language) that runs kubectl, with `\`
//! continuations joined, trailing `# comments` and `$ ` prompts removed. Also collects the files a
//! document defines as YAML blocks whose first line is `# NAME.yaml`.
//!
//! A block can be marked as needing a real cluster with an HTML comment on the lines just before
//! its fence:
//! - `<!-- needs-real-cluster: REASON -->` skips every command of the block;
//! - `<!-- needs-real-cluster "TEXT": REASON -->` skips only the commands containing TEXT.

/// One kubectl command of a document.
#[derive(Clone, Debug)]
pub struct DocCommand {
    /// 1-based line where the command starts.
    pub line: usize,
    /// The command, continuations joined, comment removed.
    pub text: String,
    /// Why it is not run, when a marker says so.
    pub needs_real_cluster: Option<String>,
}

/// What a document asks the test to run and the files it defines.
#[derive(Clone, Debug, Default)]
pub struct Doc {
    /// Commands in document order.
    pub commands: Vec<DocCommand>,
    /// `(file name, content)` of each `# NAME.yaml` block.
    pub files: Vec<(String, String)>,
}

const SHELL_LANGS: [&str; 5] = ["", "sh", "bash", "shell", "console"];

/// One `needs-real-cluster` marker: the text a command must contain (None: every command).
struct Marker {
    only: Option<String>,
    reason: String,
}

fn parse_marker(line: &str) -> Option<Marker> {
    let inner = line
        .trim()
        .strip_prefix("<!--")?
        .strip_suffix("-->")?
        .trim()
        .strip_prefix("needs-real-cluster")?;
    let (head, reason) = inner.split_once(':')?;
    let head = head.trim();
    let only = if head.is_empty() {
        None
    } else {
        Some(head.strip_prefix('"')?.strip_suffix('"')?.to_owned())
    };
    Some(Marker {
        only,
        reason: reason.trim().to_owned(),
    })
}

/// The markers on the lines right before line `fence` (stopping at the first other line).
fn markers_before(lines: &[&str], fence: usize) -> Vec<Marker> {
    lines[..fence]
        .iter()
        .rev()
        .skip_while(|l| l.trim().is_empty())
        .map_while(|l| parse_marker(l))
        .collect()
}

/// The line without a trailing `# comment` (a `#` outside quotes, after whitespace).
fn strip_comment(line: &str) -> &str {
    let (mut single, mut double) = (false, false);
    let mut prev_space = true;
    for (i, c) in line.char_indices() {
        match c {
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            '#' if !single && !double && prev_space => return line[..i].trim_end(),
            _ => {}
        }
        prev_space = c.is_whitespace();
    }
    line.trim_end()
}

/// Whether a shell line runs kubectl against a cluster (not a client-only subcommand).
fn runs_kubectl(line: &str) -> bool {
    let words: Vec<&str> = line.split_whitespace().collect();
    let runs = words
        .iter()
        .enumerate()
        .any(|(i, w)| *w == "kubectl" && (i == 0 || ["|", ";", "&&", "||"].contains(&words[i - 1])));
    let local = [
        "--client",
        "kubectl config",
        "kubectl completion",
        "--dry-run=client",
    ]
    .iter()
    .any(|l| line.contains(l));
    runs && !local
}

/// The logical lines of a shell block: `\` continuations joined, with their first line number.
fn logical_lines(block: &[(usize, &str)]) -> Vec<(usize, String)> {
    let mut out: Vec<(usize, String)> = Vec::new();
    let mut pending: Option<(usize, String)> = None;
    for (n, raw) in block {
        let text = raw.trim();
        let text = text.strip_prefix("$ ").unwrap_or(text);
        let (start, mut acc) = pending.take().unwrap_or((*n, String::new()));
        match text.strip_suffix('\\') {
            Some(head) => {
                acc.push_str(head.trim_end());
                acc.push(' ');
                pending = Some((start, acc));
            }
            None => {
                acc.push_str(text);
                out.push((start, acc));
            }
        }
    }
    out.extend(pending);
    out
}

/// Parses one Markdown document.
pub fn parse(markdown: &str) -> Doc {
    let lines: Vec<&str> = markdown.lines().collect();
    let mut doc = Doc::default();
    let mut i = 0;
    while i < lines.len() {
        let Some(lang) = lines[i].trim_start().strip_prefix("```") else {
            i += 1;
            continue;
        };
        let lang = lang.trim().to_owned();
        let fence = i;
        let mut block = Vec::new();
        i += 1;
        while i < lines.len() && !lines[i].trim_start().starts_with("```") {
            block.push((i + 1, lines[i]));
            i += 1;
        }
        i += 1;
        if lang == "yaml" {
            if let Some((_, first)) = block.first()
                && let Some(name) = first.trim().strip_prefix("# ")
                && name.ends_with(".yaml")
                && !name.contains(' ')
            {
                let body: Vec<&str> = block.iter().map(|(_, l)| *l).collect();
                doc.files.push((name.to_owned(), body.join("\n") + "\n"));
            }
            continue;
        }
        if !SHELL_LANGS.contains(&lang.as_str()) {
            continue;
        }
        let markers = markers_before(&lines, fence);
        for (line, text) in logical_lines(&block) {
            let text = strip_comment(&text).to_owned();
            if text.is_empty() || !runs_kubectl(&text) {
                continue;
            }
            let needs_real_cluster = markers
                .iter()
                .find(|m| m.only.as_deref().is_none_or(|t| text.contains(t)))
                .map(|m| m.reason.clone());
            doc.commands.push(DocCommand {
                line,
                text,
                needs_real_cluster,
            });
        }
    }
    doc
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "intro `kubectl get inline` is prose\n\
        ```sh\n\
        kubectl get rg -A     # READY column\n\
        kubectl version --client\n\
        helm install x\n\
        kubectl -n ci create secret generic s \\\n  --from-literal=a='b # not a comment'\n\
        forgerunner crd | kubectl apply -f -\n\
        ```\n\
        <!-- needs-real-cluster \"logs deploy\": no Deployment -->\n\
        ```sh\n\
        kubectl get pods\n\
        kubectl logs deploy/forgerunner\n\
        ```\n\
        ```yaml\n# g.yaml\nkind: RunnerGroup\n```\n\
        ```yaml\nkind: Other\n```\n";

    #[test]
    fn finds_kubectl_commands_markers_and_files() {
        let doc = parse(SAMPLE);
        let texts: Vec<&str> = doc.commands.iter().map(|c| c.text.as_str()).collect();
        assert_eq!(
            texts,
            [
                "kubectl get rg -A",
                "kubectl -n ci create secret generic s --from-literal=a='b # not a comment'",
                "forgerunner crd | kubectl apply -f -",
                "kubectl get pods",
                "kubectl logs deploy/forgerunner",
            ]
        );
        assert_eq!(doc.commands[0].line, 3);
        assert!(doc.commands[3].needs_real_cluster.is_none());
        assert_eq!(
            doc.commands[4].needs_real_cluster.as_deref(),
            Some("no Deployment")
        );
        assert_eq!(
            doc.files,
            [("g.yaml".to_owned(), "# g.yaml\nkind: RunnerGroup\n".to_owned())]
        );
    }
}
