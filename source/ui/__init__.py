"""What the tools on top share: exit codes and argument types (command.py), progress lines
(progress.py) and self-contained HTML report pages (htmlpage.py). The cli, the benchmark and the
conformance runner import it; it imports none of them."""
