#!/bin/sh
# A git remote to try Harness against: a bare repository holding examples/orders
# (branch main), and a contract whose workspace is cloned from it. Publishing then
# pushes one commit to a branch harness/<task_id>-<run id prefix> in that repository.
#
#   sh examples/remote/make_remote.sh /tmp/harness-remote
set -eu
dest=$(mkdir -p "${1:?usage: make_remote.sh DIRECTORY}" && cd "$1" && pwd)
here=$(cd "$(dirname "$0")/../.." && pwd)
bare="$dest/orders.git"
work="$dest/orders-work"
[ -e "$bare" ] && { echo "$bare already exists" >&2; exit 1; }
export GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1
export GIT_AUTHOR_NAME="Example Dev" GIT_AUTHOR_EMAIL="dev@example.com"
export GIT_COMMITTER_NAME="Example Dev" GIT_COMMITTER_EMAIL="dev@example.com"
git init --quiet --bare --initial-branch=main "$bare"
git init --quiet --initial-branch=main "$work"
(cd "$here/examples/orders" && tar --exclude=__pycache__ --exclude=.pytest_cache -cf - .) | (cd "$work" && tar -xf -)
git -C "$work" add -A
git -C "$work" commit --quiet -m "Orders: totals with discounts"
git -C "$work" push --quiet "$bare" main
rm -rf "$work"
sed -e "s|\"kind\": \"path\"|\"kind\": \"git\"|" \
    -e "s|\"path\": \"examples/orders\"|\"url\": \"file://$bare\", \"ref\": \"main\"|" \
    "$here/examples/demo/contract.json" > "$dest/contract.json"
cat <<DONE
Bare repository: $bare
Contract:        $dest/contract.json

  export HARNESS_GIT_ALLOWED_REMOTES='file://$dest/*'
  export HARNESS_GIT_AUTHOR='Harness Bot <harness@example.com>'
  python manage.py run_task $dest/contract.json --script examples/demo/proposals.json
  python manage.py approvals list            # the publish shows the remote, branch, author, message and diff
  python manage.py approvals grant <request-id> --user reviewer
  python manage.py resume_run <run-id>
  git -C $bare log --format='%h %an%n%B' --branches='harness/*'
DONE
