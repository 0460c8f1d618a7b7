#!/usr/bin/env bash
# Gradescope's setup script (runs once, as root, when the autograder image is built; Ubuntu
# 22.04/24.04 or Debian 12). Made by scripts/gradescope/make-autograder, which puts the project
# beside it (source/prefill-decode.tar.gz), the lab to grade (source/LAB) and the course staff's
# hidden cases (source/private/). Installs what the grader needs, the CUDA toolkit from NVIDIA's
# repository when nvcc is missing (its headers and compiler are needed even without a GPU: the
# simulator compiles CUDA sources), builds the grader once, and creates the user submissions run
# as. README.md beside this file says more.
set -euo pipefail
src=/autograder/source
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq cmake g++ make catch2 libcli11-dev nlohmann-json3-dev libboost-context-dev python3 \
  ca-certificates wget util-linux >/dev/null
if ! command -v nvcc >/dev/null 2>&1 && ! ls /usr/local/cuda*/bin/nvcc >/dev/null 2>&1; then
  . /etc/os-release
  case "$ID$VERSION_ID" in
    ubuntu22.04) repo=ubuntu2204 ;;
    ubuntu24.04) repo=ubuntu2404 ;;
    debian12) repo=debian12 ;;
    *) echo "setup.sh: no CUDA repository known for $PRETTY_NAME; install the CUDA toolkit by hand" >&2; exit 1 ;;
  esac
  wget -q "https://developer.download.nvidia.com/compute/cuda/repos/$repo/x86_64/cuda-keyring_1.1-1_all.deb"
  dpkg -i cuda-keyring_1.1-1_all.deb >/dev/null
  apt-get update -qq
  # the compiler and the headers (and cuBLAS, which the chapter programs link), not the whole toolkit
  apt-get install -y -qq cuda-nvcc-12-6 cuda-cudart-dev-12-6 libcublas-dev-12-6 cuda-cccl-12-6 >/dev/null
fi
mkdir -p /autograder/project
tar -xzf "$src/prefill-decode.tar.gz" -C /autograder/project
id pdgrade >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin pdgrade
# the hidden cases stay readable by root only: a submission runs as pdgrade
if [ -d "$src/private" ]; then chown -R root:root "$src/private" && chmod -R go-rwx "$src/private"; fi
/autograder/project/scripts/grade --setup
