// TCP sockets for the local proxy and the origin client (Sources/SparseHTTP/Net/Socket.swift).
// Every socket is non-blocking and close-on-exec: the Swift side waits for readiness with
// dispatch sources, so no call here ever blocks a thread (sc_resolve excepted: DNS may wait).
#define _GNU_SOURCE
#include "cshim.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <pthread.h>
#include <unistd.h>

int sc_tcp_listen(const char *host, int port, int backlog) {
    struct addrinfo hints;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICHOST | AI_NUMERICSERV;
    char service[16];
    snprintf(service, sizeof service, "%d", port);
    struct addrinfo *found = NULL;
    int status = getaddrinfo(host, service, &hints, &found);
    if (status != 0) {
        errno = status == EAI_SYSTEM ? errno : EINVAL;
        return -1;
    }
    int fd = -1;
    int saved = EADDRNOTAVAIL;
    for (struct addrinfo *address = found; address != NULL; address = address->ai_next) {
        fd = socket(address->ai_family, address->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, address->ai_protocol);
        if (fd < 0) { saved = errno; continue; }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, address->ai_addr, address->ai_addrlen) == 0 && listen(fd, backlog) == 0) break;
        saved = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(found);
    if (fd < 0) errno = saved;
    return fd;
}

int sc_tcp_local_port(int fd) {
    struct sockaddr_storage address;
    socklen_t length = sizeof address;
    if (getsockname(fd, (struct sockaddr *)&address, &length) != 0) return -1;
    if (address.ss_family == AF_INET) return ntohs(((struct sockaddr_in *)&address)->sin_port);
    if (address.ss_family == AF_INET6) return ntohs(((struct sockaddr_in6 *)&address)->sin6_port);
    errno = EAFNOSUPPORT;
    return -1;
}

/// `address:port`, `[v6]:port`, as getnameinfo with NI_NUMERICHOST | NI_NUMERICSERV would
/// give it, without its formatting machinery (every accepted client is named here); an IPv6
/// address with a scope (link-local) goes through getnameinfo, which adds `%interface`.
static void format_peer(const struct sockaddr_storage *address, socklen_t length, char *peer, size_t peer_size) {
    char host[INET6_ADDRSTRLEN + 2];
    unsigned port = 0;
    const char *written = NULL;
    if (address->ss_family == AF_INET) {
        const struct sockaddr_in *v4 = (const struct sockaddr_in *)address;
        written = inet_ntop(AF_INET, &v4->sin_addr, host, sizeof host);
        port = ntohs(v4->sin_port);
    } else if (address->ss_family == AF_INET6 && ((const struct sockaddr_in6 *)address)->sin6_scope_id == 0) {
        const struct sockaddr_in6 *v6 = (const struct sockaddr_in6 *)address;
        host[0] = '[';
        written = inet_ntop(AF_INET6, &v6->sin6_addr, host + 1, sizeof host - 2);
        if (written != NULL) strcat(host, "]");
        port = ntohs(v6->sin6_port);
    } else {
        char name[NI_MAXHOST], service[NI_MAXSERV];
        if (getnameinfo((const struct sockaddr *)address, length, name, sizeof name, service, sizeof service,
                        NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
            snprintf(peer, peer_size, address->ss_family == AF_INET6 ? "[%s]:%s" : "%s:%s", name, service);
        } else {
            snprintf(peer, peer_size, "?");
        }
        return;
    }
    if (written == NULL) {
        snprintf(peer, peer_size, "?");
        return;
    }
    // host, ':' and the port's digits, written by hand.
    char digits[6];
    int count = 0;
    do {
        digits[count++] = (char)('0' + port % 10);
        port /= 10;
    } while (port > 0);
    size_t used = strlen(host);
    if (used + 1 + (size_t)count + 1 > peer_size) {
        snprintf(peer, peer_size, "?");
        return;
    }
    memcpy(peer, host, used);
    peer[used++] = ':';
    while (count > 0) peer[used++] = digits[--count];
    peer[used] = 0;
}

int sc_tcp_accept(int fd, char *peer, size_t peer_size) {
    struct sockaddr_storage address;
    socklen_t length = sizeof address;
    int client = accept4(fd, (struct sockaddr *)&address, &length, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (client < 0) return -1;
    int one = 1;
    setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (peer != NULL && peer_size > 0) format_peer(&address, length, peer, peer_size);
    return client;
}

ssize_t sc_send(int fd, const void *buffer, size_t count) {
    return send(fd, buffer, count, MSG_NOSIGNAL | MSG_DONTWAIT);
}

ssize_t sc_send2(int fd, const void *first, size_t first_count, const void *second, size_t second_count) {
    struct iovec parts[2] = {{(void *)first, first_count}, {(void *)second, second_count}};
    struct msghdr message;
    memset(&message, 0, sizeof message);
    message.msg_iov = parts;
    message.msg_iovlen = 2;
    return sendmsg(fd, &message, MSG_NOSIGNAL | MSG_DONTWAIT);
}

ssize_t sc_recv(int fd, void *buffer, size_t count) {
    return recv(fd, buffer, count, MSG_DONTWAIT);
}

int sc_shutdown_write(int fd) { return shutdown(fd, SHUT_WR); }

int sc_tcp_idle_usable(int fd) {
    char byte;
    ssize_t count = recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    return count < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

/// getaddrinfo for TCP to `port` with `flags`: the addresses copied into `found` (at most
/// `capacity`), how many, or a negative getaddrinfo error.
static int lookup(const char *host, int port, int flags, struct sc_address *found, int capacity) {
    struct addrinfo hints;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = flags;
    char service[16];
    snprintf(service, sizeof service, "%d", port);
    struct addrinfo *list = NULL;
    int status = getaddrinfo(host, service, &hints, &list);
    if (status != 0) return status < 0 ? status : -status;
    int count = 0;
    for (struct addrinfo *address = list; address != NULL && count < capacity; address = address->ai_next) {
        if (address->ai_addrlen > sizeof found[count].storage) continue;
        memcpy(&found[count].storage, address->ai_addr, address->ai_addrlen);
        found[count].length = address->ai_addrlen;
        count++;
    }
    freeaddrinfo(list);
    return count;
}

/// Only a numeric address: no name service, and no AI_ADDRCONFIG, which asks the kernel for the
/// interface addresses (a netlink round trip) on every call. inet_aton's forms for IPv4 (127.1,
/// 0x7f.1) count as numeric.
static const int numeric_flags = AI_NUMERICSERV | AI_NUMERICHOST;

int sc_resolve(const char *host, int port, struct sc_address *found, int capacity) {
    int count = lookup(host, port, numeric_flags, found, capacity);
    if (count == (EAI_NONAME < 0 ? EAI_NONAME : -EAI_NONAME)) {
        count = lookup(host, port, AI_NUMERICSERV | AI_ADDRCONFIG, found, capacity);
    }
    return count;
}

int sc_numeric_address(const char *host, int port, struct sc_address *found, int capacity) {
    int count = lookup(host, port, numeric_flags, found, capacity);
    return count > 0 ? count : 0;
}

int sc_tcp_connect(const struct sc_address *address) {
    int fd = socket(address->storage.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    if (connect(fd, (const struct sockaddr *)&address->storage, address->length) != 0 && errno != EINPROGRESS) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    return fd;
}

int sc_socket_error(int fd) {
    int error = 0;
    socklen_t length = sizeof error;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0) return errno;
    return error;
}

// MARK: - Signals as bytes on a pipe

#include <signal.h>

static int sc_signal_write_end = -1;

static void sc_signal_handler(int number) {
    int saved = errno;
    unsigned char byte = (unsigned char)number;
    ssize_t ignored = write(sc_signal_write_end, &byte, 1);
    (void)ignored;
    errno = saved;
}

int sc_signal_pipe(const int *signals, int count) {
    static int read_end = -1;
    if (read_end < 0) {
        int ends[2];
        if (pipe2(ends, O_NONBLOCK | O_CLOEXEC) != 0) return -1;
        read_end = ends[0];
        sc_signal_write_end = ends[1];
    }
    sigset_t mask;
    sigemptyset(&mask);
    for (int index = 0; index < count; index++) {
        struct sigaction action;
        memset(&action, 0, sizeof action);
        action.sa_handler = sc_signal_handler;
        action.sa_flags = SA_RESTART;
        sigemptyset(&action.sa_mask);
        if (sigaction(signals[index], &action, NULL) != 0) return -1;
        sigaddset(&mask, signals[index]);
    }
    pthread_sigmask(SIG_UNBLOCK, &mask, NULL);
    return read_end;
}

// MARK: - epoll for the reactor

int sc_epoll_create(void) { return epoll_create1(EPOLL_CLOEXEC); }

static int epoll_add(int epoll_fd, int fd, uint32_t events, uint64_t token) {
    struct epoll_event event;
    memset(&event, 0, sizeof event);
    event.events = events;
    event.data.u64 = token;
    return epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &event);
}

int sc_epoll_watch(int epoll_fd, int fd, uint64_t token) {
    return epoll_add(epoll_fd, fd, EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, token);
}

int sc_epoll_watch_input(int epoll_fd, int fd, uint64_t token) {
    return epoll_add(epoll_fd, fd, EPOLLIN | EPOLLET, token);
}

int sc_epoll_watch_listener(int epoll_fd, int fd, uint64_t token) {
    return epoll_add(epoll_fd, fd, EPOLLIN | EPOLLET | EPOLLEXCLUSIVE, token);
}

int sc_epoll_unwatch(int epoll_fd, int fd) {
    struct epoll_event event;
    memset(&event, 0, sizeof event);
    return epoll_ctl(epoll_fd, EPOLL_CTL_DEL, fd, &event);
}

int sc_epoll_wait(int epoll_fd, uint64_t *tokens, uint32_t *directions, int capacity, int timeout_ms) {
    struct epoll_event events[64];
    if (capacity > 64) capacity = 64;
    int count = epoll_wait(epoll_fd, events, capacity, timeout_ms);
    for (int index = 0; index < count; index++) {
        uint32_t flags = events[index].events;
        uint32_t direction = 0;
        if (flags & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) direction |= SC_EPOLL_READABLE;
        if (flags & (EPOLLOUT | EPOLLHUP | EPOLLERR)) direction |= SC_EPOLL_WRITABLE;
        if (flags & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) direction |= SC_EPOLL_HANGUP;
        tokens[index] = events[index].data.u64;
        directions[index] = direction;
    }
    return count;
}

int sc_wake_create(void) {
    return eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
}

void sc_wake_signal(int fd) {
    uint64_t one = 1;
    while (write(fd, &one, sizeof one) < 0 && errno == EINTR) {}
}

void sc_wake_drain(int fd) {
    uint64_t count;
    while (read(fd, &count, sizeof count) < 0 && errno == EINTR) {}
}

int sc_thread_set_name(const char *name) {
    char truncated[16];
    strncpy(truncated, name, sizeof truncated - 1);
    truncated[sizeof truncated - 1] = 0;
    return pthread_setname_np(pthread_self(), truncated);
}
