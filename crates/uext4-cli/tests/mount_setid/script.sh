#!/bin/sh
# Set-id and ACL behaviour in directory $1 (run as root); prints results.
cd "$1" || exit 1
umask 022
N="setpriv --reuid 65534 --regid 65534 --clear-groups"
G="setpriv --reuid 65534 --regid 65534 --groups 4242"
show() { for f in "$@"; do echo "$f $(stat -c '%a %u %g' "$f")"; done; }
mkdir w && chmod 777 w
for f in f1 f3 f4 f5 f9; do touch w/$f; chmod 6777 w/$f; done
touch w/f2 && chmod 6767 w/f2
$N sh -c 'echo x >> w/f1'
$N sh -c 'echo x >> w/f2'
echo x >> w/f3
$N truncate -s 0 w/f4
$N sh -c ': > w/f5'
$N fallocate -l 8192 w/f9
touch w/f6 w/f7 w/f8 && chmod 6755 w/f6 && chmod 2745 w/f7 && chmod 6755 w/f8
chown 65534 w/f6
chgrp 100 w/f7
chown root:root w/f8
show w/f1 w/f2 w/f3 w/f4 w/f5 w/f6 w/f7 w/f8 w/f9
mkdir sg && chgrp 4242 sg && chmod 2777 sg
$N touch sg/a
$N mkdir sg/d
$N perl -MFcntl -e 'sysopen(F,"sg/s",O_CREAT|O_WRONLY,02755) or die "$!"'
$G perl -MFcntl -e 'sysopen(F,"sg/t",O_CREAT|O_WRONLY,02755) or die "$!"'
perl -MFcntl -e 'sysopen(F,"sg/r",O_CREAT|O_WRONLY,02755) or die "$!"'
$N mkdir -m 0775 sg/d/e
show sg/a sg/d sg/s sg/t sg/r sg/d/e
mkdir acl && chmod 777 acl && echo data > acl/f && chmod 666 acl/f
setfacl -m u:65534:--- acl/f
$N cat acl/f >/dev/null 2>&1 && echo "nobody read acl/f: allowed" || echo "nobody read acl/f: denied"
$N sh -c 'echo y >> acl/f' 2>/dev/null && echo "nobody write acl/f: allowed" || echo "nobody write acl/f: denied"
echo data > acl/g && chmod 600 acl/g && setfacl -m g:4242:r-- acl/g
$G cat acl/g >/dev/null 2>&1 && echo "group read acl/g: allowed" || echo "group read acl/g: denied"
$N cat acl/g >/dev/null 2>&1 && echo "nobody read acl/g: allowed" || echo "nobody read acl/g: denied"
mkdir dacl && chmod 777 dacl
setfacl -d -m u::rwx,u:65534:rwx,g::r-x,g:4242:r--,m::rwx,o::--- dacl
$N sh -c 'umask 077; touch dacl/f; mkdir dacl/d; mkdir -m 0750 dacl/e'
perl -MFcntl -e 'umask 022; sysopen(F,"dacl/p",O_CREAT|O_WRONLY,0640) or die "$!"'
show dacl/f dacl/d dacl/e dacl/p
getfacl -n dacl/f dacl/d dacl/e dacl/p 2>&1
chmod 640 dacl/f
getfacl -n dacl/f 2>&1
$N sh -c 'echo z > dacl/f' 2>/dev/null && echo "nobody write dacl/f: allowed" || echo "nobody write dacl/f: denied"
mkdir k && chmod 777 k && touch k/a && chown 65534:0 k/a && chmod 2775 k/a
$N setfacl -m u:1:r k/a
show k/a
mkdir c && chmod 777 c
for f in a b d e g; do touch c/$f; chown 65534:0 c/$f; done
chmod 2745 c/a && $G chgrp 4242 c/a
chmod 6745 c/b && $N perl -e 'chown(-1, -1, "c/b") or die "$!"'
touch c/r c/s && chmod 6745 c/r && chmod 6755 c/s
perl -e 'chown(-1, -1, "c/r", "c/s") or die "$!"'
chmod 755 c/d && $N chmod 2755 c/d
chmod 6777 c/e && $N truncate -s 1 c/e
chmod 2745 c/g && $G perl -e 'chown(65534, -1, "c/g") or die "$!"'
mkdir c/dir && chmod 6777 c/dir && perl -e 'chown(-1, -1, "c/dir") or die "$!"'
show c/a c/b c/r c/s c/d c/e c/g c/dir
touch plain && chmod 644 plain && show plain
