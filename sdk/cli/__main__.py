"""``python -m sdk.cli``: the same tool as the ``topicwright`` console script."""

from sdk.cli.main import run

if __name__ == "__main__":
    run()
