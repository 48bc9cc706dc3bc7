#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct node {
	int key;
	struct node *next;
} node_t;

static node_t *push(node_t *head, int key)
{
	node_t *n = malloc(sizeof(*n));
	if (!n)
		return NULL;
	n->key = key;
	n->next = head;
	return n;
}

int main(int argc, char **argv)
{
	node_t *list = NULL;
	for (int i = 0; i < argc; ++i)
		list = push(list, (int)strlen(argv[i]));
	printf("%d\n", list ? list->key : -1);
	return 0;
}
