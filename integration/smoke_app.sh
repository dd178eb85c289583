# The script the smoke application's master runs inside its YARN container. Plain shell
# and curl: it runs on any node, which has none of the client's files (no Python
# environment, no flinkyarn), and speaks to HDFS over WebHDFS, at the NameNode that was
# active when the client made the URL.
#
# usage: sh smoke_app.sh WEBHDFS_URL TEXT   writes TEXT to WEBHDFS_URL
#                                           (http://NAMENODE:PORT/webhdfs/v1/PATH), reads it back
#        sh smoke_app.sh --fail MESSAGE     fails with MESSAGE: the application must fail
set -eu

if [ "$1" = "--fail" ]; then
    echo "smoke_app failed on purpose: $2" >&2
    exit 1
fi
url=$1
text=$2
user="user.name=${USER:-$(id -un)}"
printf '%s' "$text" > smoke.txt
# A WebHDFS write takes two requests: the NameNode redirects to a DataNode, which takes the data.
datanode=$(curl -sS -f -X PUT -o /dev/null -w '%{redirect_url}' "$url?op=CREATE&overwrite=true&$user")
if [ -z "$datanode" ]; then
    echo "smoke_app: the NameNode named no DataNode to write $url to" >&2
    exit 1
fi
curl -sS -f -X PUT -T smoke.txt "$datanode"
back=$(curl -sS -f -L "$url?op=OPEN&$user")
if [ "$back" != "$text" ]; then
    echo "smoke_app: read back '$back' from $url, wrote '$text'" >&2
    exit 1
fi
echo "wrote ${#text} characters to $url from container ${CONTAINER_ID:-?}"
