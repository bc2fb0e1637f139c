#!/bin/bash
# deploy/templates/rootfs-setup.sh: runs inside a freshly built template rootfs (chroot, as
# root) to make it a sandbox template. Part of every template's hash.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive LC_ALL=C

# The sandbox user: uid/gid 1000, home /home/user, bash. No password (nobody logs in; the
# agent switches users itself).
if ! getent group user >/dev/null; then groupadd --gid 1000 user; fi
if ! getent passwd user >/dev/null; then
  useradd --uid 1000 --gid 1000 --create-home --home-dir /home/user --shell /bin/bash \
          --comment "sandbox user" user
fi
passwd --lock root >/dev/null
passwd --lock user >/dev/null

# sudo, as E2B's base image has it for "user": the agent's /.airlock/bin/sudo (in every
# sandbox; not setuid: it asks the agent, which starts the command as the API starts root's).
# The agent lets root and the group "sudo" use it, without a password.
ln -sfn /.airlock/bin/sudo /usr/bin/sudo
usermod -a -G sudo user
# Root in a sandbox has no capabilities, so apt cannot switch to its _apt user to download:
# it downloads as root, into a partial directory root owns.
printf 'APT::Sandbox::User "root";\n' > /etc/apt/apt.conf.d/90airlock-sandbox
chown root:root /var/cache/apt/archives/partial
chown 1000:1000 /home/user
chmod 0755 /home/user

# Mount points airlock-vmm uses (/dev is emptied by the build script at the very end: it is a
# fresh tmpfs in every sandbox).
mkdir -p /.airlock /proc /sys /tmp /dev /run
chmod 1777 /tmp

# Per-sandbox files airlock-vmm writes (hostname, hosts, resolv.conf when the spec names a
# resolver) start empty; nothing of the build host stays in the template.
: > /etc/resolv.conf
: > /etc/machine-id
echo sandbox > /etc/hostname
printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n' > /etc/hosts

# Smaller and reproducible: no package lists, caches, logs or build leftovers.
apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/cache/debconf/*-old \
       /var/log/apt /var/log/dpkg.log /var/log/alternatives.log /tmp/* /var/tmp/* \
       /root/.cache
