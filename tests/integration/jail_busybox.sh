# tests/integration/jail_busybox.sh: make_busybox_template DIR, a tiny sandbox template
# from the host's static busybox (made in milliseconds, no Debian needed): /bin with every
# applet, root and user (1000) accounts, /home/user, /tmp, template.json. Sourced by the
# jail tests; uses their fail() if defined.
# shellcheck shell=bash
make_busybox_template() {
  local dir=$1 bb
  bb=$(command -v busybox) || { echo "busybox is not installed (deploy/setup installs busybox-static)" >&2; return 1; }
  file -L "$bb" | grep -q 'statically linked' || { echo "$bb is not statically linked" >&2; return 1; }
  mkdir -p "$dir/rootfs"/{bin,etc,proc,dev,sys,tmp,root,home/user,.airlock,mnt,usr/bin}
  cp "$bb" "$dir/rootfs/bin/busybox"
  local c
  for c in $("$bb" --list); do
    [ "$c" = busybox ] || ln -sf busybox "$dir/rootfs/bin/$c"
  done
  printf 'root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/sh\nnobody:x:65534:65534::/nonexistent:/bin/false\n' \
    > "$dir/rootfs/etc/passwd"
  printf 'root:x:0:\ntty:x:5:\nuser:x:1000:\nnogroup:x:65534:\n' > "$dir/rootfs/etc/group"
  echo 'root:*:19000:0:99999:7:::' > "$dir/rootfs/etc/shadow"
  chmod 0640 "$dir/rootfs/etc/shadow"
  chown 1000:1000 "$dir/rootfs/home/user"
  chmod 1777 "$dir/rootfs/tmp"
  chmod 0700 "$dir/rootfs/root"
  printf '{"name":"busybox","user":"user","workdir":"/home/user","env":{"PATH":"/bin:/usr/bin"}}\n' \
    > "$dir/template.json"
}

